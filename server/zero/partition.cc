#include "server/zero/partition.h"

#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace distopt {

absl::StatusOr<ZeroPartition> PartitionParameters(
    const std::vector<std::vector<int64_t>>& groups, int world_size) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size: ", world_size, "; expected at least 1"));
  }
  ZeroPartition partition;
  partition.parameters.assign(world_size,
                              std::vector<std::vector<int>>(groups.size()));
  partition.owner.resize(groups.size());
  partition.load.assign(world_size, 0);
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<int64_t>& counts = groups[g];
    for (size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("groups[", g, "][", i, "]: ", counts[i],
                         " elements; expected a count >= 0"));
      }
    }
    std::vector<int> order(counts.size());
    std::iota(order.begin(), order.end(), 0);
    // Largest first; a stable sort keeps ties in their original order.
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return counts[a] > counts[b]; });
    partition.owner[g].assign(counts.size(), -1);
    for (int index : order) {
      // The first rank with the smallest load.
      const int rank = static_cast<int>(
          std::min_element(partition.load.begin(), partition.load.end()) -
          partition.load.begin());
      partition.parameters[rank][g].push_back(index);
      partition.owner[g][index] = rank;
      partition.load[rank] += counts[index];
    }
  }
  return partition;
}

}  // namespace distopt
