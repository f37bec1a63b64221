// ZeroRunner: a daemon's ZeRO optimizer over its own parameters, driven by
// the ZeroService RPCs. It finds the parameters by name, runs the
// collectives through the daemon's group, takes the gradients from an
// autograd context, and holds the parameters' locks (in id order) for the
// whole step, so a forward never sees a half-done one. Thread-safe.
#ifndef DISTOPT_SERVER_ZERO_ZERO_RUNNER_H_
#define DISTOPT_SERVER_ZERO_ZERO_RUNNER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/autograd/context_table.h"
#include "server/comm/group_membership.h"
#include "server/optim/registry.h"
#include "server/parameter_store.h"
#include "server/zero/zero_optimizer.h"

namespace distopt {

struct ZeroSpec {
  std::string kind;
  struct Group {
    absl::flat_hash_map<std::string, HyperValue> hyperparameters;
    std::vector<std::string> parameter_names;
  };
  std::vector<Group> groups;
  absl::Duration timeout = absl::Seconds(60);
};

struct ZeroStatus {
  std::vector<std::pair<std::string, int>> owners;  // Name, owning rank.
  std::vector<int64_t> loads;
  int64_t state_bytes = 0;
  int64_t steps = 0;
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
};

class ZeroRunner {
 public:
  // All must outlive the runner; `membership` may be null (no group: the
  // calls fail with FAILED_PRECONDITION).
  ZeroRunner(ParameterStore* parameters, ContextTable* contexts,
             const OptimizerRegistry* kinds,
             const std::atomic<GroupMembership*>* membership)
      : parameters_(parameters),
        contexts_(contexts),
        kinds_(kinds),
        membership_(membership) {}

  // ALREADY_EXISTS when this daemon has one; NOT_FOUND for an unknown kind
  // or parameter name.
  absl::StatusOr<ZeroStatus> Create(const ZeroSpec& spec)
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status Step(uint64_t context_id) ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<ZeroStatus> Get() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  absl::StatusOr<GroupMembership*> Membership() const;
  ZeroStatus StatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  ParameterStore* const parameters_;
  ContextTable* const contexts_;
  const OptimizerRegistry* const kinds_;
  const std::atomic<GroupMembership*>* const membership_;

  mutable absl::Mutex mutex_;
  ZeroSpec spec_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::vector<std::shared_ptr<Parameter>>> groups_
      ABSL_GUARDED_BY(mutex_);
  std::unique_ptr<ZeroOptimizer> optimizer_ ABSL_GUARDED_BY(mutex_);
  int64_t steps_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_ZERO_ZERO_RUNNER_H_
