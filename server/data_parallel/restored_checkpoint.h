// What ZeRO and post-local SGD share when a group resumes from its ranks'
// checkpoints: the collective check that every rank restored the state of
// the same optimizer at the same group step.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_RESTORED_CHECKPOINT_H_
#define DISTOPT_SERVER_DATA_PARALLEL_RESTORED_CHECKPOINT_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/comm/communicator.h"

namespace distopt {

// Collective, when a group optimizer is created on ranks that may have
// restored one from their checkpoints. `same` is this rank's verdict on
// whether its checkpoint holds the optimizer being created (OK when it
// restored none); `step` the group step it restored (nullopt: none). OK
// when every rank's verdict is OK and every rank restored the same step
// (or none did); else FAILED_PRECONDITION on every rank: this rank's
// verdict, the rank that refused, or every rank's step.
absl::Status AgreeOnRestoredState(Communicator& communicator,
                                  const absl::Status& same,
                                  std::optional<int64_t> step,
                                  absl::string_view what);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_RESTORED_CHECKPOINT_H_
