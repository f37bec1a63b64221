// What ZeRO and post-local SGD share when a group resumes from its ranks'
// checkpoints: the collective check that every rank restored the state of
// the same optimizer at the same group step.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_RESTORED_CHECKPOINT_H_
#define DISTOPT_SERVER_DATA_PARALLEL_RESTORED_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/comm/communicator.h"

namespace distopt {

// What a rank restored of a group optimizer from its checkpoint.
struct RestoredGroupOptimizer {
  std::string optimizer;  // Its kind, groups and options, described.
  int rank = 0;
  int world_size = 0;
  int64_t step = 0;  // The group's.
};

// Collective, when the group optimizer described by `creating` is created
// (by `create_call`) on ranks that may have restored one (`restored`;
// nullopt: none). OK when every rank restored the same optimizer, at its
// own rank and world size, at the same group step (or none did); else
// FAILED_PRECONDITION on every rank: what this rank's checkpoint holds, the
// rank that refused, or every rank's step. Nothing is created then.
absl::Status AgreeOnRestoredState(
    Communicator& communicator,
    const std::optional<RestoredGroupOptimizer>& restored,
    const std::string& creating, absl::string_view what,
    absl::string_view create_call);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_RESTORED_CHECKPOINT_H_
