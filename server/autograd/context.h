// AutogradContext: what one distributed autograd context holds on this
// daemon: the gradients it accumulated, by parameter id, on the parameters'
// device, and the forwards recorded in it with what their backwards need.
// Two accumulations of one parameter's gradient add up. Everything it holds
// counts against the daemon's memory budget. Its bookkeeping is
// thread-safe; gradient values are added in place and read (by a step, by
// GetGradients) without a copy, so a read while the same context still
// accumulates may see a mix of before and after: trainers finish their
// backward pass before they step or read (as with torch).
#ifndef DISTOPT_SERVER_AUTOGRAD_CONTEXT_H_
#define DISTOPT_SERVER_AUTOGRAD_CONTEXT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/backend.h"
#include "common/memory_budget.h"
#include "common/tensor.h"
#include "server/params/parameter.h"

namespace distopt {

struct ContextInfo {
  uint64_t id = 0;
  absl::Time created;
  absl::Time last_used;
  std::vector<uint64_t> parameter_ids;  // Parameters with a gradient.
  uint64_t bytes = 0;                   // Gradient memory held.
  uint64_t saved_bytes = 0;             // Tensors saved by forwards.
};

// One parameter's share of an accumulation: a dense gradient (the
// parameter's dtype and shape), or rows of one (`rows`, each in range, and
// `row_values` [rows.size(), columns]). Host tensors.
struct GradientUpdate {
  const Parameter* parameter = nullptr;
  std::optional<Tensor> dense;
  std::vector<int64_t> rows;
  Tensor row_values;
};

class AutogradContext {
 public:
  // `reservation` holds the context's own bookkeeping bytes; `owner` is
  // the identity of the client that made it ("" without mutual TLS).
  AutogradContext(uint64_t id, absl::Time now, Reservation reservation,
                  std::string owner = "");
  AutogradContext(const AutogradContext&) = delete;
  AutogradContext& operator=(const AutogradContext&) = delete;

  uint64_t id() const { return id_; }
  const std::string& owner() const { return owner_; }

  // Adds every update to its parameter's gradient in this context, creating
  // gradients on `backend`'s device the first time (a new gradient updated
  // by rows starts at zero elsewhere). All or nothing: RESOURCE_EXHAUSTED
  // over `budget`, or a failure to stage an addend on the device, leaves
  // every gradient as it was. (Only a device kernel failing in the adds
  // themselves, after which the device is unusable, leaves them partly
  // added.)
  absl::Status Accumulate(const std::vector<GradientUpdate>& updates,
                          const std::shared_ptr<Backend>& backend,
                          MemoryBudget& budget) ABSL_LOCKS_EXCLUDED(mutex_);

  // What a forward keeps for its backward.
  struct ForwardRecord {
    std::string op;
    std::vector<Tensor> saved;
    Reservation saved_reservation;  // The saved tensors' bytes.
    std::vector<uint64_t> parameter_ids;
    std::vector<uint64_t> parameter_versions;
    std::vector<std::pair<DType, Shape>> outputs;
  };
  // Stores a forward; returns its id (1, 2, ... within the context).
  uint64_t AddForward(ForwardRecord record) ABSL_LOCKS_EXCLUDED(mutex_);
  // NOT_FOUND naming `forward_id` when this context has no such forward.
  absl::StatusOr<std::shared_ptr<const ForwardRecord>> Forward(
      uint64_t forward_id) const ABSL_LOCKS_EXCLUDED(mutex_);

  // A forward is backpropagated once, as in torch. BeginBackward claims it
  // for a backward whose output gradients hash to `digest`: kFirst when it
  // was never backpropagated (the caller accumulates, then calls
  // EndBackward), kRetry when a backward with the same output gradients
  // completed (a client retrying after a lost reply: the caller answers it
  // again without accumulating). FAILED_PRECONDITION when it was
  // backpropagated with other gradients; ABORTED while another backward of
  // it is in progress.
  enum class BackwardClaim { kFirst, kRetry };
  absl::StatusOr<BackwardClaim> BeginBackward(uint64_t forward_id,
                                              uint64_t digest)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Ends a kFirst claim: `done` when the gradients were accumulated, else
  // the forward may be backpropagated again.
  void EndBackward(uint64_t forward_id, bool done) ABSL_LOCKS_EXCLUDED(mutex_);

  // The parameters' gradients (sharing storage; nullopt where one has
  // none), in the order asked for, under one lock.
  std::vector<std::optional<Tensor>> Gradients(
      absl::Span<const uint64_t> parameter_ids) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  std::optional<Tensor> Gradient(uint64_t parameter_id) const
      ABSL_LOCKS_EXCLUDED(mutex_) {
    return Gradients({parameter_id})[0];
  }
  // The ids of the parameters with a gradient, in id order.
  std::vector<uint64_t> GradientIds() const ABSL_LOCKS_EXCLUDED(mutex_);

  // True when the context holds no gradient and no forward.
  bool empty() const ABSL_LOCKS_EXCLUDED(mutex_);
  void Touch(absl::Time now) ABSL_LOCKS_EXCLUDED(mutex_);
  ContextInfo Info() const ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Time last_used() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  struct StoredGradient {
    Tensor values;
    Reservation reservation;
  };
  struct StoredForward {
    std::shared_ptr<const ForwardRecord> record;
    enum class Backward {
      kNone,
      kInProgress,
      kDone
    } backward = Backward::kNone;
    uint64_t digest = 0;  // Of the output gradients, once claimed.
  };

  const uint64_t id_;
  const std::string owner_;
  const absl::Time created_;
  const Reservation reservation_;
  mutable absl::Mutex mutex_;
  absl::Time last_used_ ABSL_GUARDED_BY(mutex_);
  std::map<uint64_t, StoredGradient> gradients_ ABSL_GUARDED_BY(mutex_);
  uint64_t next_forward_ ABSL_GUARDED_BY(mutex_) = 1;
  std::map<uint64_t, StoredForward> forwards_ ABSL_GUARDED_BY(mutex_);
};

// A digest of a backward's output gradients (dtypes, shapes and bytes), to
// tell a retry from a different backward.
uint64_t DigestOf(const std::vector<Tensor>& tensors);

}  // namespace distopt

#endif  // DISTOPT_SERVER_AUTOGRAD_CONTEXT_H_
