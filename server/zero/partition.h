// The parameter partition of ZeroRedundancyOptimizer, exactly as torch
// computes it: parameter groups in order with each rank's load carried
// across groups; within a group, parameters sorted by element count,
// largest first, ties in their original order; each goes to the
// lowest-numbered rank with the least load. Every rank computes the same
// partition with no communication.
#ifndef DISTOPT_SERVER_ZERO_PARTITION_H_
#define DISTOPT_SERVER_ZERO_PARTITION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace distopt {

struct ZeroPartition {
  // [rank][group]: indices into the group, in assignment order.
  std::vector<std::vector<std::vector<int>>> parameters;
  // [group][index]: the owning rank.
  std::vector<std::vector<int>> owner;
  // Elements per rank.
  std::vector<int64_t> load;
};

// `groups[g][i]` is the element count of parameter i of group g.
// INVALID_ARGUMENT for a world size below 1 or a negative count.
absl::StatusOr<ZeroPartition> PartitionParameters(
    const std::vector<std::vector<int64_t>>& groups, int world_size);

}  // namespace distopt

#endif  // DISTOPT_SERVER_ZERO_PARTITION_H_
