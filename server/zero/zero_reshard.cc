#include "server/zero/zero_reshard.h"

#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/zero/zero_checkpoint.h"

namespace distopt {

absl::StatusOr<OptimizerStateDict> ReadReshardedState(
    const GroupResume& resume, const std::vector<ParamGroup>& groups,
    const ZeroPartition& partition, int rank) {
  std::vector<std::vector<int64_t>> counts;
  for (const ParamGroup& group : groups) {
    counts.emplace_back();
    for (const Tensor* p : group.params) {
      counts.back().push_back(p->num_elements());
    }
  }
  absl::StatusOr<ZeroPartition> saved =
      PartitionParameters(counts, resume.saved_world_size);
  if (!saved.ok()) return saved.status();
  // This rank's positions, and the saved ranks whose shards hold them.
  const std::vector<std::vector<int64_t>> positions = GlobalPositions(groups);
  std::set<int64_t> mine;
  std::set<int> sources;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      if (partition.owner[g][i] != rank) continue;
      mine.insert(positions[g][i]);
      sources.insert(saved->owner[g][i]);
    }
  }
  // A rank that holds nothing still takes the groups' hyperparameters.
  if (sources.empty()) sources.insert(rank % resume.saved_world_size);
  OptimizerStateDict dict;
  for (const int source : sources) {
    absl::Status read = ReadSavedRank(
        resume, source, "ZeRO",
        [&](const CheckpointSections& sections) -> absl::StatusOr<bool> {
          absl::StatusOr<std::optional<ZeroCheckpoint>> shard =
              ReadZeroCheckpoint(sections,
                                 [&](const checkpoint::SavedGroupOptimizer& h) {
                                   return resume.Holds(h, source);
                                 });
          if (!shard.ok()) return shard.status();
          if (!shard->has_value()) return false;
          OptimizerStateDict& state = (*shard)->group.state;
          if (dict.param_groups.empty()) {
            dict.kind = state.kind;
            dict.param_groups = std::move(state.param_groups);
          }
          for (auto& [position, entry] : state.state) {
            if (mine.count(position) > 0) {
              dict.state[position] = std::move(entry);
            }
          }
          return true;
        });
    if (!read.ok()) return read;
  }
  return dict;
}

}  // namespace distopt
