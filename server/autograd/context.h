// AutogradContext: the gradients one distributed autograd context holds on
// this daemon, by parameter id, on the parameters' device. Two
// accumulations of one parameter's gradient add up. Gradient memory counts
// against the daemon's budget. Thread-safe; a step that reads gradients
// while the same context still accumulates sees either value, so trainers
// finish their backward pass before they step (as with torch).
#ifndef DISTOPT_SERVER_AUTOGRAD_CONTEXT_H_
#define DISTOPT_SERVER_AUTOGRAD_CONTEXT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/backend.h"
#include "common/tensor.h"
#include "server/memory_budget.h"
#include "server/parameter.h"

namespace distopt {

struct ContextInfo {
  uint64_t id = 0;
  absl::Time created;
  absl::Time last_used;
  std::vector<uint64_t> parameter_ids;  // Parameters with a gradient.
  uint64_t bytes = 0;                   // Gradient memory held.
};

class AutogradContext {
 public:
  AutogradContext(uint64_t id, absl::Time now);
  AutogradContext(const AutogradContext&) = delete;
  AutogradContext& operator=(const AutogradContext&) = delete;

  uint64_t id() const { return id_; }

  // Adds host tensor `gradient` (the parameter's dtype and shape, checked by
  // the caller) to the parameter's gradient in this context, creating it on
  // `backend`'s device the first time. RESOURCE_EXHAUSTED over `budget`.
  absl::Status Accumulate(const Parameter& parameter, const Tensor& gradient,
                          const std::shared_ptr<Backend>& backend,
                          MemoryBudget& budget) ABSL_LOCKS_EXCLUDED(mutex_);

  // The parameter's gradient (sharing storage), or nullopt when it has none.
  std::optional<Tensor> Gradient(uint64_t parameter_id) const
      ABSL_LOCKS_EXCLUDED(mutex_);

  void Touch(absl::Time now) ABSL_LOCKS_EXCLUDED(mutex_);
  ContextInfo Info() const ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Time last_used() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  struct StoredGradient {
    Tensor values;
    Reservation reservation;
  };

  const uint64_t id_;
  const absl::Time created_;
  mutable absl::Mutex mutex_;
  absl::Time last_used_ ABSL_GUARDED_BY(mutex_);
  std::map<uint64_t, StoredGradient> gradients_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_AUTOGRAD_CONTEXT_H_
