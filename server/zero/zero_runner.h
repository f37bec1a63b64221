// ZeroRunner: a daemon's ZeRO optimizer over its own parameters, driven by
// the ZeroService RPCs. It finds the parameters by name, runs the
// collectives through the daemon's group, takes the gradients from an
// autograd context, and holds the parameters' locks (in id order) for the
// whole step, so a forward never sees a half-done one. It keeps the state
// dict consolidated on this rank, keyed by parameter name, until the next
// step. Thread-safe.
#ifndef DISTOPT_SERVER_ZERO_ZERO_RUNNER_H_
#define DISTOPT_SERVER_ZERO_ZERO_RUNNER_H_

#include <atomic>
#include <functional>
#include <limits>
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
#include "server/optim/step_metrics.h"
#include "server/zero/zero_checkpoint.h"
#include "server/zero/zero_optimizer.h"

namespace distopt {

struct ZeroSpec {
  // What the request's own checks found wrong (the rest of the spec is
  // then partly unset): refused on every rank alike, as the runner's.
  absl::Status refused;
  std::string kind;
  std::vector<NamedGroupSpec> groups;
  ZeroOptions options;
  absl::Duration timeout = absl::Seconds(60);
};

struct ZeroRankBytes {
  int rank = 0;
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t state_bytes = 0;
  int64_t scratch_bytes = 0;
  int64_t steps = 0;
};

struct ZeroInfo {
  std::string kind;
  ZeroOptions options;
  int rank = 0;
  int world_size = 0;
  int groups = 0;
  bool joined = false;
  std::vector<std::pair<std::string, int>> owners;  // Name, owning rank.
  std::vector<int64_t> loads;
  int64_t state_bytes = 0;
  int64_t scratch_bytes = 0;
  int64_t steps = 0;
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  std::vector<ZeroRankBytes> ranks;  // Every rank's, as published.
  // Not OK after a step failed half-way (see ZeroOptimizer::damage).
  absl::Status damage;
};

// An unsharded ZeRO state dict with the parameter name at each position.
struct NamedStateDict {
  OptimizerStateDict state_dict;
  std::vector<std::string> parameter_names;
};

class ZeroRunner {
 public:
  explicit ZeroRunner(const RankResources& resources) : resources_(resources) {}

  // ALREADY_EXISTS when this daemon has one; NOT_FOUND for an unknown kind
  // or parameter name.
  absl::StatusOr<ZeroInfo> Create(const ZeroSpec& spec)
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status Step(uint64_t context_id, absl::string_view caller = "")
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Returns the number of the other ranks' steps taken part in.
  absl::StatusOr<int64_t> Join() ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<ZeroInfo> AddParamGroup(const NamedGroupSpec& group)
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<ZeroInfo> SetHyperparameters(
      int group, const absl::flat_hash_map<std::string, HyperValue>& changes)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // True on rank `to`, which then holds the state dict.
  absl::StatusOr<bool> ConsolidateStateDict(int to) ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<NamedStateDict> GetStateDict() const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // `state_dict` is this rank's copy, or the error its conversion met (the
  // other ranks are then refused too, rather than left waiting).
  absl::Status LoadStateDict(const absl::StatusOr<NamedStateDict>& state_dict)
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<ZeroInfo> Get() const ABSL_LOCKS_EXCLUDED(mutex_);

  // For a checkpoint: copies this rank's optimizer while no step runs, and
  // runs `while_stopped` (the copy of the parameters) before one can; a
  // copy of the restored one while its Create has not come yet; nullopt
  // when this daemon has neither.
  absl::StatusOr<std::optional<ZeroCheckpoint>> Snapshot(
      absl::FunctionRef<absl::Status()> while_stopped) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // What the daemon's checkpoint held: the next Create resumes it, on every
  // rank at once. Create then checks, collectively, that it creates the
  // same optimizer (kind, groups and their parameters, options) and that
  // every rank restored the same group step (FAILED_PRECONDITION saying
  // which step each rank has otherwise, and nothing is created); the shards
  // are loaded and the step count goes on. A group of another world size
  // than the checkpoint's reshards it: ranks that restored none take part,
  // and every rank reads its share from the saved ranks' folders as the
  // checkpoint's manifest names them (on a filesystem every rank can read:
  // a shared one across hosts).
  void SetRestored(ZeroCheckpoint restored) ABSL_LOCKS_EXCLUDED(mutex_);
  // Called around every step (periodic checkpoints of the group). Set
  // them before the first step.
  void SetStepHooks(GroupStepHooks hooks) { hooks_ = std::move(hooks); }
  // OK unless a step failed half-way and left the model torn (then no
  // checkpoint may save it as good).
  absl::Status Damage() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  // One more group step; a restored count at the largest there is stays
  // there (a checkpoint's step is read, not trusted).
  void CountStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (steps_ < std::numeric_limits<int64_t>::max()) ++steps_;
  }
  absl::Status CheckCreatedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // CheckCreatedLocked, after dropping an optimizer made before the group
  // replaced a rank (re-reading the last group checkpoint to resume from).
  absl::Status CheckCurrentLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Maps the dict's names onto this model's positions.
  absl::StatusOr<OptimizerStateDict> ByPositionLocked(
      const NamedStateDict& named) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  ZeroInfo StatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Collective, in Create: loads the restored shard into `optimizer` if
  // every rank agrees (see SetRestored).
  // Returns the group step it resumes at (0 when fresh). At another world
  // size than the checkpoint's, the state is resharded from the saved
  // ranks' files and every rank takes the parameters of the lowest rank
  // that restored them.
  absl::StatusOr<int64_t> ResumeLocked(Communicator& communicator,
                                       const ZeroSpec& spec,
                                       const std::vector<ParamGroup>& tensors,
                                       ZeroOptimizer& optimizer, bool* changed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Refreshes what Get reports, here and, for the other ranks, in the
  // group's store.
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const RankResources resources_;

  mutable absl::Mutex mutex_;
  ZeroSpec spec_ ABSL_GUARDED_BY(mutex_);
  // spec_.kind's steps in /metrics.
  const StepMetrics* step_metrics_ ABSL_GUARDED_BY(mutex_) = nullptr;
  ParameterGroups groups_ ABSL_GUARDED_BY(mutex_);
  std::unique_ptr<ZeroOptimizer> optimizer_ ABSL_GUARDED_BY(mutex_);
  int64_t steps_ ABSL_GUARDED_BY(mutex_) = 0;
  std::optional<NamedStateDict> consolidated_ ABSL_GUARDED_BY(mutex_);
  std::optional<ZeroCheckpoint> restored_ ABSL_GUARDED_BY(mutex_);
  // What its checkpoints carry from its creation (manifest, run).
  GroupRun run_ ABSL_GUARDED_BY(mutex_);
  GroupStepHooks hooks_;
  ReplacementWatch replacement_ ABSL_GUARDED_BY(mutex_){
      "zero: the ZeRO optimizer", "CreateZero"};
  // What this rank last published in the group's store.
  std::string published_record_ ABSL_GUARDED_BY(mutex_);
  // Read without mutex_, which a joined rank holds while it waits in the
  // other ranks' collectives: Step must be refused and Get answered then.
  std::atomic<bool> joined_{false};
  mutable absl::Mutex published_mutex_;
  std::optional<ZeroInfo> published_ ABSL_GUARDED_BY(published_mutex_);
  // What Get says without one.
  absl::Status unpublished_ ABSL_GUARDED_BY(published_mutex_) =
      absl::FailedPreconditionError(
          "zero: no ZeRO optimizer on this daemon; expected CreateZero first");
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_ZERO_ZERO_RUNNER_H_
