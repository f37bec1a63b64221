// LocalSgdRunner: a daemon's post-local SGD optimizer over its own
// parameters, driven by the LocalSgdService RPCs: parameters found by
// name, gradients from an autograd context, the group's collectives and
// subgroups, and the parameters' locks held for the whole step. Warnings
// (as torch gives) go to the daemon's log and to the caller.
// Thread-safe.
#ifndef DISTOPT_SERVER_LOCALSGD_LOCAL_SGD_RUNNER_H_
#define DISTOPT_SERVER_LOCALSGD_LOCAL_SGD_RUNNER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/data_parallel/group_step_hooks.h"
#include "server/data_parallel/named_groups.h"
#include "server/data_parallel/rank_resources.h"
#include "server/data_parallel/replacement_watch.h"
#include "server/localsgd/local_sgd_checkpoint.h"
#include "server/localsgd/local_sgd_optimizer.h"
#include "server/optim/step_metrics.h"

namespace distopt {

struct LocalSgdSpec {
  std::string kind;
  std::vector<NamedGroupSpec> groups;
  // subgroup_size 0: the ranks on this daemon's host.
  LocalSgdOptions options;
  absl::Duration timeout = absl::Seconds(60);
};

struct LocalSgdInfo {
  std::string kind;
  int rank = 0;
  int world_size = 0;
  int64_t step = 0;
  Averaging next_averaging;
  int next_gradient_group_size = 0;  // 0: none.
  int64_t bucket_bytes = 0;
  std::vector<std::string> warnings;
  // Not OK after a step failed half-way (see LocalSgdOptimizer::damage).
  absl::Status damage;
};

class LocalSgdRunner {
 public:
  explicit LocalSgdRunner(const RankResources& resources)
      : resources_(resources) {}

  absl::StatusOr<LocalSgdInfo> Create(LocalSgdSpec spec)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Returns the size of the group this step averaged in (0: none).
  absl::StatusOr<int> Step(uint64_t context_id, absl::string_view caller = "")
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<LocalSgdInfo> Get() const ABSL_LOCKS_EXCLUDED(mutex_);
  // OK unless a step failed half-way (then no checkpoint may save the
  // parameters as good).
  absl::Status Damage() const ABSL_LOCKS_EXCLUDED(mutex_);

  // For a checkpoint: copies this rank's optimizer while no step runs, and
  // runs `while_stopped` (the copy of the parameters) before one can; a
  // copy of the restored one while its Create has not come yet; nullopt
  // when this daemon has neither.
  absl::StatusOr<std::optional<LocalSgdCheckpoint>> Snapshot(
      absl::FunctionRef<absl::Status()> while_stopped) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // What the daemon's checkpoint held: the next Create resumes it, on every
  // rank at once, after checking collectively that it creates the same
  // optimizer (kind, groups and their parameters, averager, options, rank
  // and world size) and that every rank restored the same step
  // (FAILED_PRECONDITION saying which step each rank has otherwise, and
  // nothing is created). The averager goes on from its step: no second
  // warm-up.
  void SetRestored(LocalSgdCheckpoint restored) ABSL_LOCKS_EXCLUDED(mutex_);
  // Called around every step (periodic checkpoints of the group). Set
  // them before the first step.
  void SetStepHooks(GroupStepHooks hooks) { hooks_ = std::move(hooks); }
  absl::StatusOr<LocalSgdInfo> SetHyperparameters(
      int group, const absl::flat_hash_map<std::string, HyperValue>& changes)
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<std::pair<OptimizerStateDict, int64_t>> GetStateDict() const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Returns warnings (a dict without a step).
  absl::StatusOr<std::vector<std::string>> LoadStateDict(
      const OptimizerStateDict& state_dict, std::optional<int64_t> step)
      ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  absl::Status CheckCreatedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // CheckCreatedLocked, after dropping an optimizer made before the group
  // replaced a rank (re-reading the last group checkpoint to resume from).
  absl::Status CheckCurrentLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  LocalSgdInfo StatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // What Get answers while a step holds mutex_ (waiting for a peer, up to
  // its timeout): set after every step, and by every Get that finds the
  // optimizer free.
  void PublishLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Collective, in Create: loads the restored state into `optimizer` if
  // every rank agrees (see SetRestored).
  absl::Status ResumeLocked(Communicator& communicator,
                            const LocalSgdSpec& spec,
                            const std::vector<ParamGroup>& tensors,
                            LocalSgdOptimizer& optimizer,
                            std::vector<std::string>* warnings, bool* changed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const RankResources resources_;

  mutable absl::Mutex mutex_;
  LocalSgdSpec spec_ ABSL_GUARDED_BY(mutex_);
  // spec_.kind's steps in /metrics.
  const StepMetrics* step_metrics_ ABSL_GUARDED_BY(mutex_) = nullptr;
  ParameterGroups groups_ ABSL_GUARDED_BY(mutex_);
  std::unique_ptr<LocalSgdOptimizer> optimizer_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> warnings_ ABSL_GUARDED_BY(mutex_);
  std::optional<LocalSgdCheckpoint> restored_ ABSL_GUARDED_BY(mutex_);
  // What its checkpoints carry from its creation (manifest, run).
  GroupRun run_ ABSL_GUARDED_BY(mutex_);
  GroupStepHooks hooks_;
  ReplacementWatch replacement_ ABSL_GUARDED_BY(mutex_){
      "post-local SGD: the post-local SGD optimizer", "CreatePostLocalSgd"};
  mutable absl::Mutex published_mutex_ ABSL_ACQUIRED_AFTER(mutex_);
  mutable absl::StatusOr<LocalSgdInfo> published_
      ABSL_GUARDED_BY(published_mutex_){absl::FailedPreconditionError(
          "post-local SGD: none on this daemon; expected CreatePostLocalSgd "
          "first")};
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_LOCALSGD_LOCAL_SGD_RUNNER_H_
