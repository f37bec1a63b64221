#include "common/shape.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace distopt {

absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> shape,
                                           DType dtype,
                                           absl::string_view field) {
  if (shape.size() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", shape.size(), " dimensions; expected at most ", kMaxRank));
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t max_elements = kMax / static_cast<int64_t>(ElementSize(dtype));
  int64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "]: dimension ", shape[i],
                       " is negative; expected a size >= 0"));
    }
  }
  for (int64_t dim : shape) {
    if (dim == 0) return 0;
  }
  for (int64_t dim : shape) {
    if (count > max_elements / dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": shape ", ShapeToString(shape), " of ", DTypeName(dtype),
          " overflows: expected at most ", max_elements, " elements"));
    }
    count *= dim;
  }
  return count;
}

int64_t NumElements(absl::Span<const int64_t> shape) {
  // A zero anywhere makes the product zero, whatever the others: a checked
  // shape may hold huge dimensions beside a zero ([2^40, 2^40, 0]), whose
  // product from the left would overflow first (found by the fuzzers).
  for (int64_t dim : shape) {
    if (dim == 0) return 0;
  }
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace distopt
