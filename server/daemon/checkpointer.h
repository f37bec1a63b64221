// Checkpointer: the daemon's checkpoints in --checkpoint_dir. It restores
// them at start-up, saves one at graceful shutdown, every
// --checkpoint_interval and every --checkpoint_every_steps optimizer steps
// (on its own thread), and on demand (CheckpointService.Save). A rank of a
// data-parallel group saves when its group optimizer (ZeRO, post-local SGD)
// reaches a multiple of --checkpoint_every_steps, and its next step waits
// for the copy: every rank saves at the same group step.
//
// What is saved: the parameters, the optimizer table's optimizers, and
// this rank's ZeRO optimizer (its shard; see ZeroRunner::SetRestored for
// the resume) and post-local SGD optimizer (LocalSgdRunner::SetRestored).
// A save is a consistent cut: every optimizer of the table, the ZeRO and
// the post-local SGD optimizers stopped between steps (their locks held,
// in that order) and every parameter read-locked at once, for
// as long as the copy into host memory takes; then the copy is written
// while steps go on, so the step path never waits for the disk. The copy
// costs host memory of the parameters and the optimizers' state: for as
// long as the write takes, or, when saves are scheduled, for good (it is
// reused by the next save). Thread-safe; saves are one at a time.
#ifndef DISTOPT_SERVER_DAEMON_CHECKPOINTER_H_
#define DISTOPT_SERVER_DAEMON_CHECKPOINTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/data_parallel/group_step_hooks.h"
#include "server/dist_optim/optimizer_table.h"
#include "server/localsgd/local_sgd_runner.h"
#include "server/params/checkpoint.h"
#include "server/params/checkpoint_control.h"
#include "server/params/parameter_store.h"
#include "server/zero/zero_runner.h"

namespace distopt {

// The payload Checkpointer::Restore's error carries when the checkpoint in
// --checkpoint_dir could not be restored, whatever its code (a folder that
// cannot be written is FAILED_PRECONDITION, as an unavailable device is):
// the daemon exits 5 for it.
inline constexpr char kCheckpointNotRestored[] =
    "type.googleapis.com/distopt.CheckpointNotRestored";

struct CheckpointSchedule {
  std::string dir;
  int keep = 1;
  absl::Duration interval = absl::ZeroDuration();  // Zero: not by time.
  int64_t every_steps = 0;                         // Zero: not by steps.
};

class Checkpointer : public CheckpointControl {
 public:
  // `damage` says why the model must not be saved now (a data-parallel
  // step failed half-way), or OK. The pointers must outlive this.
  Checkpointer(CheckpointSchedule schedule, ParameterStore* parameters,
               OptimizerTable* optimizers, ZeroRunner* zero,
               LocalSgdRunner* local_sgd, std::function<absl::Status()> damage);
  ~Checkpointer() override;

  // Locks the folder for this daemon (see LockCheckpointDir; its error as
  // it is), then restores the newest whole checkpoint (parameters, then
  // optimizers; an error carries kCheckpointNotRestored).
  absl::StatusOr<RestoredCheckpoint> Restore();
  // Starts saving on the schedule; counts the table's steps.
  void Start();
  // Stops the schedule, waiting for a save being written.
  void Stop();
  // The save at shutdown, with no call in flight: the values are written
  // in place, with no copy.
  absl::StatusOr<SaveReport> SaveAtShutdown();

  absl::StatusOr<SaveReport> Save(
      const std::string& reason,
      const std::function<bool()>& abandoned) override;
  absl::StatusOr<std::vector<CheckpointListing>> List() const override;
  std::string restore_fell_back() const override;
  std::string last_save_error() const override;

 private:
  absl::StatusOr<SaveReport> SaveContents(
      const std::string& reason, bool live,
      const std::function<bool()>& abandoned = nullptr);
  void RunSchedule();
  // A save refused before its copy: recorded, and the group steps waiting
  // for the copy go on. Returns `status`.
  absl::Status Failed(absl::Status status) ABSL_LOCKS_EXCLUDED(mutex_);
  // Before a save: the folder is still the one this daemon locked, or
  // was removed and is made and locked again (FAILED_PRECONDITION when
  // that cannot be, e.g. another daemon holds the path now).
  absl::Status KeepFolderLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(saving_);

  const CheckpointSchedule schedule_;
  ParameterStore* const parameters_;
  OptimizerTable* const optimizers_;
  ZeroRunner* const zero_;
  LocalSgdRunner* const local_sgd_;
  const std::function<absl::Status()> damage_;

  absl::Mutex saving_;  // One save at a time.
  mutable absl::Mutex mutex_;
  std::string restore_fell_back_ ABSL_GUARDED_BY(mutex_);
  std::string last_save_error_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  // A group step asked for a checkpoint, and the next waits for its copy.
  bool group_cut_pending_ ABSL_GUARDED_BY(mutex_) = false;
  // The last save's copies, kept when saves are scheduled: the next copy
  // goes into them instead of into freshly allocated memory (whose first
  // touch, on a virtual machine above all, costs more than the copy).
  std::map<uint64_t, Tensor> recycled_values_ ABSL_GUARDED_BY(saving_);
  std::vector<OptimizerTable::Saved> recycled_state_ ABSL_GUARDED_BY(saving_);
  // Steps since the last save began.
  std::atomic<int64_t> steps_{0};
  std::thread scheduler_;
  // Held open while this daemon uses the folder.
  int dir_lock_ ABSL_GUARDED_BY(saving_) = -1;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_DAEMON_CHECKPOINTER_H_
