#include "common/dtype.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace distopt {

size_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt64:
      return 8;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt64:
      return "int64";
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  if (name == "float32" || name == "fp32") return DType::kFloat32;
  if (name == "float16" || name == "fp16") return DType::kFloat16;
  if (name == "bfloat16" || name == "bf16") return DType::kBFloat16;
  if (name == "int64") return DType::kInt64;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype: unknown dtype \"", name,
                   "\"; expected one of float32, float16, bfloat16, int64"));
}

bool IsFloatingPoint(DType dtype) { return dtype != DType::kInt64; }

}  // namespace distopt
