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
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/backend.h"
#include "common/tensor.h"
#include "server/params/memory_budget.h"
#include "server/params/parameter.h"

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

  // Adds `row_values` ([rows.size(), columns], host, the parameter's dtype)
  // to rows `rows` of the parameter's gradient: only those rows are touched
  // (the rest of a new gradient starts at zero). Rows were range-checked.
  absl::Status AccumulateRows(const Parameter& parameter,
                              const std::vector<int64_t>& rows,
                              const Tensor& row_values,
                              const std::shared_ptr<Backend>& backend,
                              MemoryBudget& budget) ABSL_LOCKS_EXCLUDED(mutex_);

  // What a forward keeps for its backward.
  struct ForwardRecord {
    std::string op;
    std::vector<Tensor> saved;
    std::vector<uint64_t> parameter_ids;
    std::vector<uint64_t> parameter_versions;
    std::vector<std::pair<DType, Shape>> outputs;
    size_t inputs = 0;
  };
  // Stores a forward; returns its id (1, 2, ... within the context).
  uint64_t AddForward(ForwardRecord record) ABSL_LOCKS_EXCLUDED(mutex_);
  // NOT_FOUND naming `forward_id` when this context has no such forward.
  absl::StatusOr<std::shared_ptr<const ForwardRecord>> Forward(
      uint64_t forward_id) const ABSL_LOCKS_EXCLUDED(mutex_);

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
  uint64_t next_forward_ ABSL_GUARDED_BY(mutex_) = 1;
  std::map<uint64_t, std::shared_ptr<const ForwardRecord>> forwards_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_AUTOGRAD_CONTEXT_H_
