// Tensor shapes: validation and element counts.
#ifndef DISTOPT_COMMON_SHAPE_H_
#define DISTOPT_COMMON_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/dtype.h"

namespace distopt {

using Shape = std::vector<int64_t>;

// Most dimensions a shape may have (as torch's limit of 64).
inline constexpr size_t kMaxRank = 64;

// Number of elements of `shape` (1 for a 0-d shape). INVALID_ARGUMENT naming
// `field` for a negative dimension, too many dimensions, or a count or byte
// size (for `dtype`) that overflows int64.
absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> shape,
                                           DType dtype,
                                           absl::string_view field);

// Number of elements of a shape already validated.
int64_t NumElements(absl::Span<const int64_t> shape);

// "[2, 3]"; "[]" for 0-d.
std::string ShapeToString(absl::Span<const int64_t> shape);

}  // namespace distopt

#endif  // DISTOPT_COMMON_SHAPE_H_
