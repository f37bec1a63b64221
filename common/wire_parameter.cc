#include "common/wire_parameter.h"

#include "common/wire_tensor.h"

namespace distopt {

void ParameterInfoToProto(const ParameterInfo& info, v1::ParameterInfo* proto) {
  proto->set_id(info.id);
  proto->set_name(info.name);
  proto->set_dtype(DTypeToProto(info.dtype));
  proto->mutable_shape()->Assign(info.shape.begin(), info.shape.end());
  proto->set_num_elements(info.num_elements);
  proto->set_byte_size(info.byte_size);
  proto->set_device(info.device.ToString());
  proto->set_version(info.version);
}

absl::StatusOr<ParameterInfo> ParameterInfoFromProto(
    const v1::ParameterInfo& proto) {
  absl::StatusOr<DType> dtype = DTypeFromProto(proto.dtype(), "info.dtype");
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<Device> device = ParseDevice(proto.device());
  if (!device.ok()) return device.status();
  ParameterInfo info;
  info.id = proto.id();
  info.name = proto.name();
  info.dtype = *dtype;
  info.shape.assign(proto.shape().begin(), proto.shape().end());
  info.num_elements = proto.num_elements();
  info.byte_size = proto.byte_size();
  info.device = *device;
  info.version = proto.version();
  return info;
}

}  // namespace distopt
