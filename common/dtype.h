// Element types of tensors, and their names and sizes.
#ifndef DISTOPT_COMMON_DTYPE_H_
#define DISTOPT_COMMON_DTYPE_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distopt {

enum class DType {
  kFloat32,
  kFloat16,
  kBFloat16,
  kInt64,
};

// Bytes per element.
size_t ElementSize(DType dtype);

// "float32", "float16", "bfloat16", "int64": the names torch uses.
absl::string_view DTypeName(DType dtype);

// Parses a name from DTypeName (also "fp32", "fp16", "bf16"); anything else is
// INVALID_ARGUMENT listing the accepted names.
absl::StatusOr<DType> ParseDType(absl::string_view name);

// True for the floating-point types an optimizer can update.
bool IsFloatingPoint(DType dtype);

}  // namespace distopt

#endif  // DISTOPT_COMMON_DTYPE_H_
