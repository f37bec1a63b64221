// Tensors from the wire: v1::TensorProto -> Tensor (TensorFromProto, with
// DTypeFromProto and CheckedNumElements under it) and back, the metadata of
// a parameter (ParameterInfoFromProto, ParseDevice), dtype names
// (ParseDType), and the fp16 / bfloat16 widening a decoded tensor goes
// through in an optimizer step.
//
// The input is a serialized v1::TensorProto; the same bytes are also tried
// as a v1::ParameterInfo, and as text for the name parsers. A tensor that
// decodes must encode back to the same message, and its 16-bit values must
// survive a round trip through fp32 (NaN stays NaN).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/device.h"
#include "common/dtype.h"
#include "common/half.h"
#include "common/shape.h"
#include "common/wire_parameter.h"
#include "common/wire_tensor.h"
#include "proto/distopt/v1/parameter.pb.h"
#include "proto/distopt/v1/tensor.pb.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace distopt;  // NOLINT

void CheckHalfRoundTrip(const Tensor& tensor) {
  if (tensor.dtype() != DType::kFloat16 && tensor.dtype() != DType::kBFloat16) {
    return;
  }
  const int64_t count = tensor.num_elements();
  std::vector<float> wide(count);
  WidenToFloat(tensor.dtype(), tensor.data(), absl::MakeSpan(wide));
  std::vector<uint16_t> narrow(count);
  NarrowFromFloat(wide, tensor.dtype(), narrow.data());
  const uint16_t* original = static_cast<const uint16_t*>(tensor.data());
  for (int64_t i = 0; i < count; ++i) {
    if (std::isnan(wide[i])) {
      const float again = tensor.dtype() == DType::kFloat16
                              ? HalfToFloat(narrow[i])
                              : BFloat16ToFloat(narrow[i]);
      if (!std::isnan(again)) std::abort();
      continue;
    }
    if (narrow[i] != original[i]) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::LimitMemoryOnce();
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);

  v1::TensorProto proto;
  if (fuzz::Parse(bytes, &proto)) {
    // The checks TensorFromProto makes, one by one.
    absl::StatusOr<DType> dtype = DTypeFromProto(proto.dtype(), "dtype");
    const Shape shape(proto.shape().begin(), proto.shape().end());
    for (DType each :
         {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt64}) {
      absl::StatusOr<int64_t> count = CheckedNumElements(shape, each, "shape");
      if (count.ok() && *count < 0) std::abort();
    }
    absl::StatusOr<Tensor> tensor = TensorFromProto(proto, "tensor");
    fuzz::Report("TensorFromProto", tensor.status());
    if (tensor.ok()) {
      if (!dtype.ok() || tensor->dtype() != *dtype) std::abort();
      if (tensor->byte_size() != proto.data().size()) std::abort();
      v1::TensorProto again;
      TensorToProto(*tensor, &again);
      if (again.dtype() != proto.dtype() || again.data() != proto.data() ||
          again.shape_size() != proto.shape_size()) {
        std::abort();
      }
      for (int i = 0; i < proto.shape_size(); ++i) {
        if (again.shape(i) != proto.shape(i)) std::abort();
      }
      CheckHalfRoundTrip(*tensor);
      (void)tensor->DebugString();
    }
  }

  v1::ParameterInfo info;
  if (fuzz::Parse(bytes, &info)) {
    absl::StatusOr<ParameterInfo> parsed = ParameterInfoFromProto(info);
    if (parsed.ok()) {
      v1::ParameterInfo again;
      ParameterInfoToProto(*parsed, &again);
      if (again.dtype() != info.dtype() || again.id() != info.id()) {
        std::abort();
      }
    }
  }

  if (size <= 64) {
    (void)ParseDType(bytes);
    absl::StatusOr<Device> device = ParseDevice(bytes);
    if (device.ok() && ParseDevice(device->ToString()).value() != *device) {
      std::abort();
    }
  }
  return 0;
}
