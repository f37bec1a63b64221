#include "server/comm/block_offsets.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace distopt {

absl::StatusOr<std::vector<size_t>> BlockOffsets(
    absl::Span<const size_t> counts, int ranks, size_t total,
    absl::string_view field) {
  if (counts.size() != static_cast<size_t>(ranks)) {
    return absl::InvalidArgumentError(
        absl::StrCat("counts: ", counts.size(),
                     " blocks; expected one per rank (", ranks, ")"));
  }
  std::vector<size_t> offsets;
  size_t sum = 0;
  for (size_t count : counts) {
    offsets.push_back(sum);
    sum += count;
  }
  if (sum != total) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", total, " long; the counts add up to ", sum));
  }
  return offsets;
}

}  // namespace distopt
