// What the CheckpointService asks of the daemon's checkpoints; the daemon
// (server/daemon/checkpointer.h) answers it, the service only translates.
#ifndef DISTOPT_SERVER_PARAMS_CHECKPOINT_CONTROL_H_
#define DISTOPT_SERVER_PARAMS_CHECKPOINT_CONTROL_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/params/checkpoint.h"

namespace distopt {

struct SaveReport {
  CheckpointListing saved;
  absl::Duration snapshot;  // How long steps were held back for the copy.
  absl::Duration write;
};

class CheckpointControl {
 public:
  virtual ~CheckpointControl() = default;
  // Saves a checkpoint now (after any save being written) and returns it.
  // `abandoned` (may be null) is asked when this save's turn comes: true
  // (its caller gave up waiting: a deadline passed, a cancellation) makes
  // it CANCELLED, with nothing saved.
  virtual absl::StatusOr<SaveReport> Save(
      const std::string& reason, const std::function<bool()>& abandoned) = 0;
  virtual absl::StatusOr<std::vector<CheckpointListing>> List() const = 0;
  // Which older checkpoint was restored at start-up and why; empty if the
  // newest was.
  virtual std::string restore_fell_back() const = 0;
  // The last failed save's error, until a save succeeds.
  virtual std::string last_save_error() const = 0;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_PARAMS_CHECKPOINT_CONTROL_H_
