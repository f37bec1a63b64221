// A rank's post-local SGD optimizer in its daemon's checkpoint: what it is
// (kind, groups, averager, options, rank and world size), the averager's
// step and the rank's local optimizer state, as two sections:
// "local_sgd.binpb" (the header) and "local_sgd.bin" (the state's values).
#ifndef DISTOPT_SERVER_LOCALSGD_LOCAL_SGD_CHECKPOINT_H_
#define DISTOPT_SERVER_LOCALSGD_LOCAL_SGD_CHECKPOINT_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "server/data_parallel/group_checkpoint.h"
#include "server/localsgd/local_sgd_optimizer.h"
#include "server/params/checkpoint.h"

namespace distopt {

// A rank's post-local SGD optimizer as its checkpoint holds it: the
// specification, the averager's step and the rank's local optimizer state.
struct LocalSgdCheckpoint {
  GroupCheckpoint group;    // Its step: the averager's; its state: local.
  LocalSgdOptions options;  // subgroup_size resolved.
};

std::vector<CheckpointSection> LocalSgdSections(
    const LocalSgdCheckpoint& saved);

// What the sections hold (when `wanted`, if given, wants it from the
// header); nullopt when the checkpoint has no post-local
// SGD optimizer. DATA_LOSS for damage.
absl::StatusOr<std::optional<LocalSgdCheckpoint>> ReadLocalSgdCheckpoint(
    const CheckpointSections& sections,
    const GroupCheckpointFilter& wanted = nullptr);

}  // namespace distopt

#endif  // DISTOPT_SERVER_LOCALSGD_LOCAL_SGD_CHECKPOINT_H_
