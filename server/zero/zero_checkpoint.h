// A rank's ZeRO optimizer in its daemon's checkpoint: what it is (kind,
// groups, options, rank and world size), the group's step and this rank's
// shard of the state, as two sections: "zero.binpb" (the header) and
// "zero.bin" (the shard's values).
#ifndef DISTOPT_SERVER_ZERO_ZERO_CHECKPOINT_H_
#define DISTOPT_SERVER_ZERO_ZERO_CHECKPOINT_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "server/data_parallel/group_checkpoint.h"
#include "server/params/checkpoint.h"
#include "server/zero/zero_optimizer.h"

namespace distopt {

// A rank's ZeRO optimizer as its checkpoint holds it: this rank's shard of
// the state only (a checkpoint's cost does not grow with the world size).
struct ZeroCheckpoint {
  GroupCheckpoint group;  // Its state: the shard, at global positions.
  ZeroOptions options;
};

std::vector<CheckpointSection> ZeroSections(const ZeroCheckpoint& saved);

// What the sections hold (when `wanted`, if given, wants it from the
// header); nullopt when the checkpoint has no ZeRO
// optimizer. DATA_LOSS for damage.
absl::StatusOr<std::optional<ZeroCheckpoint>> ReadZeroCheckpoint(
    const CheckpointSections& sections,
    const GroupCheckpointFilter& wanted = nullptr);

}  // namespace distopt

#endif  // DISTOPT_SERVER_ZERO_ZERO_CHECKPOINT_H_
