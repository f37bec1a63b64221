// Conversions between the wire messages of proto/distopt/v1/tensor.proto and
// the in-memory types of common/. Used by the daemon's services and by the
// client; validation errors name the request field they came from.
#ifndef DISTOPT_COMMON_WIRE_TENSOR_H_
#define DISTOPT_COMMON_WIRE_TENSOR_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "proto/distopt/v1/tensor.pb.h"

namespace distopt {

// INVALID_ARGUMENT naming `field` for DTYPE_UNSPECIFIED or an unknown value.
absl::StatusOr<DType> DTypeFromProto(v1::DType dtype, absl::string_view field);
v1::DType DTypeToProto(DType dtype);

// A host tensor holding a copy of `proto`'s data. INVALID_ARGUMENT naming
// `field` when the dtype is unknown, the shape invalid, or the byte length
// differs from shape x dtype.
absl::StatusOr<Tensor> TensorFromProto(const v1::TensorProto& proto,
                                       absl::string_view field);

// Fills `proto` from a host tensor.
void TensorToProto(const Tensor& host_tensor, v1::TensorProto* proto);

}  // namespace distopt

#endif  // DISTOPT_COMMON_WIRE_TENSOR_H_
