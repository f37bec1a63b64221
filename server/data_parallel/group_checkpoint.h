// What a rank's checkpoint of a group optimizer (ZeRO, post-local SGD)
// holds besides the optimizer's own options: its kind and groups, where in
// the group the rank was and at which group step, and the rank's state.
// Each optimizer's checkpoint embeds a SavedGroupOptimizer in its header
// section and writes the state's values to its values section.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_GROUP_CHECKPOINT_H_
#define DISTOPT_SERVER_DATA_PARALLEL_GROUP_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/data_parallel/group_checkpoint.pb.h"
#include "server/data_parallel/named_groups.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/state_dict_checkpoint.h"
#include "server/params/checkpoint.h"

namespace distopt {

struct GroupCheckpoint {
  std::string kind;
  std::vector<NamedGroupSpec> groups;  // With every group added since.
  absl::Duration timeout;
  int rank = 0;
  int world_size = 0;
  int64_t step = 0;  // The group's.
  // This rank's: ZeRO's shard (at global positions), or post-local SGD's
  // local state.
  OptimizerStateDict state;
  // The manifest: every rank's checkpoint folder, by rank (empty when the
  // ranks ran without --checkpoint_dir).
  std::vector<std::string> rank_dirs;
  // The run (see SavedGroupOptimizer.run_id); 0 in older checkpoints.
  uint64_t run_id = 0;
};

// Gives `checkpoint`'s state buffers copies of their own.
absl::Status CloneStateBuffers(GroupCheckpoint* checkpoint);

// A deep copy of a group optimizer's checkpoint (ZeroCheckpoint,
// LocalSgdCheckpoint: a GroupCheckpoint `group` and its options): a
// restored checkpoint saved again while its group has not resumed yet,
// whose buffers the resumed optimizer then takes over and steps.
template <typename Checkpoint>
absl::StatusOr<Checkpoint> DeepCopy(const Checkpoint& checkpoint) {
  Checkpoint copy = checkpoint;
  absl::Status cloned = CloneStateBuffers(&copy.group);
  if (!cloned.ok()) return cloned;
  return copy;
}

void WriteGroupCheckpoint(const GroupCheckpoint& checkpoint,
                          checkpoint::SavedGroupOptimizer* saved,
                          StateValuesWriter* values);

// Which checkpoints a reader wants, told from their headers (the values
// of the others are not read).
using GroupCheckpointFilter =
    std::function<bool(const checkpoint::SavedGroupOptimizer&)>;

// DATA_LOSS naming `header_section` (or the values section) for damage.
// nullopt when `wanted` (if given) does not want it.
absl::StatusOr<std::optional<GroupCheckpoint>> ReadGroupCheckpoint(
    const checkpoint::SavedGroupOptimizer& saved,
    const CheckpointSections& sections, const std::string& header_section,
    const std::string& values_section,
    const GroupCheckpointFilter& wanted = nullptr);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_GROUP_CHECKPOINT_H_
