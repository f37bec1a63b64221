#include "common/wire_tensor.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace distopt {

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype, absl::string_view field) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return DType::kFloat32;
    case v1::DTYPE_FLOAT16:
      return DType::kFloat16;
    case v1::DTYPE_BFLOAT16:
      return DType::kBFloat16;
    case v1::DTYPE_INT64:
      return DType::kInt64;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": dtype ", static_cast<int>(dtype),
          " is not supported; expected DTYPE_FLOAT32, DTYPE_FLOAT16, "
          "DTYPE_BFLOAT16 or DTYPE_INT64"));
  }
}

v1::DType DTypeToProto(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return v1::DTYPE_FLOAT32;
    case DType::kFloat16:
      return v1::DTYPE_FLOAT16;
    case DType::kBFloat16:
      return v1::DTYPE_BFLOAT16;
    case DType::kInt64:
      return v1::DTYPE_INT64;
  }
  return v1::DTYPE_UNSPECIFIED;
}

absl::StatusOr<Tensor> TensorFromProto(const v1::TensorProto& proto,
                                       absl::string_view field) {
  absl::StatusOr<DType> dtype =
      DTypeFromProto(proto.dtype(), absl::StrCat(field, ".dtype"));
  if (!dtype.ok()) return dtype.status();
  Shape shape(proto.shape().begin(), proto.shape().end());
  absl::StatusOr<int64_t> count =
      CheckedNumElements(shape, *dtype, absl::StrCat(field, ".shape"));
  if (!count.ok()) return count.status();
  const uint64_t expected = static_cast<uint64_t>(*count) * ElementSize(*dtype);
  if (proto.data().size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".data: ", proto.data().size(), " bytes; expected ", expected,
        " (shape ", ShapeToString(shape), " of ", DTypeName(*dtype), ")"));
  }
  absl::StatusOr<Tensor> tensor = Tensor::AllocateHost(*dtype, shape);
  if (!tensor.ok()) return tensor.status();
  if (expected != 0) std::memcpy(tensor->data(), proto.data().data(), expected);
  return tensor;
}

void TensorToProto(const Tensor& host_tensor, v1::TensorProto* proto) {
  proto->set_dtype(DTypeToProto(host_tensor.dtype()));
  proto->mutable_shape()->Assign(host_tensor.shape().begin(),
                                 host_tensor.shape().end());
  proto->set_data(static_cast<const char*>(host_tensor.data()),
                  host_tensor.byte_size());
}

}  // namespace distopt
