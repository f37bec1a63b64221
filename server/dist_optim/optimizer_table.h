// OptimizerTable: the optimizers a daemon runs over its own parameters, the
// per-worker half of DistributedOptimizer.
//
// Step(optimizer, context) applies the context's gradients. Steps are
// serialised per optimizer; parameters are locked exclusively in increasing
// id order for the update, so steps of optimizers that share parameters are
// serialised on them, steps over disjoint parameters run in parallel, and a
// reader of a parameter never sees it half-updated. A step retried with the
// same (optimizer, context) is not applied twice. Thread-safe.
#ifndef DISTOPT_SERVER_DIST_OPTIM_OPTIMIZER_TABLE_H_
#define DISTOPT_SERVER_DIST_OPTIM_OPTIMIZER_TABLE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/autograd/context_table.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/registry.h"
#include "server/optim/step_metrics.h"
#include "server/params/parameter_store.h"

namespace distopt {

struct OptimizerInfo {
  uint64_t id = 0;
  std::string kind;
  absl::flat_hash_map<std::string, HyperValue> hyperparameters;
  std::vector<uint64_t> parameter_ids;
  int64_t steps = 0;
  Device device;
};

struct StepResult {
  bool applied = false;  // False for a retry of an applied step.
  int stepped_parameters = 0;
  int skipped_parameters = 0;
};

class OptimizerTable {
 public:
  // How many recent context ids each optimizer remembers to ignore retries.
  static constexpr size_t kRememberedSteps = 4096;

  // All three must outlive the table.
  OptimizerTable(ParameterStore* parameters, ContextTable* contexts,
                 const OptimizerRegistry* kinds);

  // NOT_FOUND for an unknown kind or parameter; INVALID_ARGUMENT for no
  // parameters, a repeated one, or bad hyperparameters; RESOURCE_EXHAUSTED
  // when the optimizer's state would not fit the daemon's memory budget
  // (it is reserved whole at creation).
  absl::StatusOr<OptimizerInfo> Create(
      const std::string& kind,
      const absl::flat_hash_map<std::string, HyperValue>& hyperparameters,
      const std::vector<uint64_t>& parameter_ids) ABSL_LOCKS_EXCLUDED(mutex_);

  // NOT_FOUND for an unknown optimizer or a context this daemon does not
  // have; FAILED_PRECONDITION when a parameter was deleted meanwhile.
  // `caller` is the client's identity (see ContextTable): PERMISSION_DENIED
  // for a context another identity made.
  absl::StatusOr<StepResult> Step(uint64_t optimizer_id, uint64_t context_id,
                                  absl::string_view caller = "");

  absl::StatusOr<OptimizerInfo> Get(uint64_t optimizer_id) const;
  std::vector<OptimizerInfo> List() const ABSL_LOCKS_EXCLUDED(mutex_);
  // How many optimizers the table holds.
  size_t size() const ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<OptimizerInfo> SetHyperparameters(
      uint64_t optimizer_id,
      const absl::flat_hash_map<std::string, HyperValue>& changes);
  absl::StatusOr<OptimizerStateDict> GetStateDict(uint64_t optimizer_id) const;
  absl::Status LoadStateDict(uint64_t optimizer_id,
                             const OptimizerStateDict& state_dict);
  absl::StatusOr<OptimizerInfo> Delete(uint64_t optimizer_id)
      ABSL_LOCKS_EXCLUDED(mutex_);

  // One optimizer as a checkpoint holds it.
  struct Saved {
    OptimizerInfo info;
    // The contexts of its recent steps, oldest first: a step retried
    // after a restart is still not applied twice.
    std::vector<uint64_t> applied;
    OptimizerStateDict state_dict;
  };
  // A consistent cut: copies every optimizer while none of them steps
  // (each one's lock is held, in id order), and runs `while_stopped` (the
  // copy of the parameters) before any step goes on.
  // The state is copied into `recycled`'s tensors (an earlier snapshot)
  // where they still fit.
  absl::StatusOr<std::vector<Saved>> Snapshot(
      absl::FunctionRef<absl::Status()> while_stopped,
      std::vector<Saved> recycled = {}) const ABSL_LOCKS_EXCLUDED(mutex_);
  // Makes `recycled` hold host tensors, their pages touched, for every
  // state buffer of every optimizer, for Snapshot to copy into: done
  // outside the optimizers' locks, except for a moment each to read what
  // state it has.
  absl::Status PrepareSnapshot(std::vector<Saved>* recycled) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Makes the saved optimizers again under their ids, over the store's
  // parameters, and gives out no id below `next_id`; for a table with no
  // optimizers yet. All or nothing. DATA_LOSS when one does not fit its
  // parameters (damage); NOT_FOUND for a kind this daemon does not have (a
  // plugin not loaded).
  // Optimizers over a parameter the store does not have (deleted before
  // the save) are left out, each with a line in `dropped`.
  absl::Status Restore(std::vector<Saved> saved, uint64_t next_id,
                       std::vector<std::string>* dropped = nullptr)
      ABSL_LOCKS_EXCLUDED(mutex_);
  uint64_t next_id() const ABSL_LOCKS_EXCLUDED(mutex_);

  // Called after every applied step, outside the table's locks (periodic
  // checkpoints count steps). Set it before the first step.
  void SetStepObserver(std::function<void()> observer) {
    step_observer_ = std::move(observer);
  }

 private:
  struct Entry {
    uint64_t id = 0;
    std::string kind;
    // Its steps in /metrics (looked up once, not on every step).
    const StepMetrics* step_metrics = nullptr;
    std::vector<std::shared_ptr<Parameter>> parameters;
    absl::Mutex mutex;  // Serialises this optimizer's steps and changes.
    std::unique_ptr<FunctionalOptimizer> optimizer ABSL_GUARDED_BY(mutex);
    int64_t steps ABSL_GUARDED_BY(mutex) = 0;
    absl::flat_hash_set<uint64_t> applied ABSL_GUARDED_BY(mutex);
    std::deque<uint64_t> applied_order ABSL_GUARDED_BY(mutex);
  };

  absl::StatusOr<std::shared_ptr<Entry>> Find(uint64_t optimizer_id) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<StepResult> ApplyStep(uint64_t optimizer_id,
                                       uint64_t context_id,
                                       absl::string_view caller);
  // An entry over `parameter_ids` with a new optimizer (not in the table).
  absl::StatusOr<std::shared_ptr<Entry>> MakeEntry(
      const std::string& kind,
      const absl::flat_hash_map<std::string, HyperValue>& hyperparameters,
      const std::vector<uint64_t>& parameter_ids) const;
  static OptimizerInfo InfoLocked(const Entry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(entry.mutex);

  ParameterStore* const parameters_;
  ContextTable* const contexts_;
  const OptimizerRegistry* const kinds_;
  // Held by Snapshot (exclusively) and Create (shared), before any other
  // lock of the table.
  mutable absl::Mutex cut_;
  mutable absl::Mutex mutex_;
  uint64_t next_id_ ABSL_GUARDED_BY(mutex_) = 1;
  std::map<uint64_t, std::shared_ptr<Entry>> optimizers_
      ABSL_GUARDED_BY(mutex_);
  std::function<void()> step_observer_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_DIST_OPTIM_OPTIMIZER_TABLE_H_
