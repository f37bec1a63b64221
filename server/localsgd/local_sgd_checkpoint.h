// A rank's post-local SGD optimizer in its daemon's checkpoint: what it is
// (kind, groups, averager, options, rank and world size), the averager's
// step and the rank's local optimizer state, as two sections:
// "local_sgd.binpb" (the header) and "local_sgd.bin" (the state's values).
#ifndef DISTOPT_SERVER_LOCALSGD_LOCAL_SGD_CHECKPOINT_H_
#define DISTOPT_SERVER_LOCALSGD_LOCAL_SGD_CHECKPOINT_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "server/localsgd/local_sgd_runner.h"
#include "server/params/checkpoint.h"

namespace distopt {

std::vector<CheckpointSection> LocalSgdSections(
    const LocalSgdCheckpoint& saved);

// What the sections hold; nullopt when the checkpoint has no post-local
// SGD optimizer. DATA_LOSS for damage.
absl::StatusOr<std::optional<LocalSgdCheckpoint>> ReadLocalSgdCheckpoint(
    const CheckpointSections& sections);

}  // namespace distopt

#endif  // DISTOPT_SERVER_LOCALSGD_LOCAL_SGD_CHECKPOINT_H_
