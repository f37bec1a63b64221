// MemoryBudget: the daemon's limits on memory that clients can make it
// hold.
//
// Everything the daemon keeps for its clients holds a Reservation for its
// bytes: parameters, the staging buffers of writes in flight, gradients and
// tensors saved by forwards in autograd contexts (and each context's own
// bookkeeping), optimizer state, the group's key-value store, and the
// buffers of requests that arrive in chunks (while they arrive). A single
// tensor over `max_tensor_bytes`, or a reservation that would take the total
// over `max_total_bytes`, is refused with RESOURCE_EXHAUSTED naming what
// did not fit. Zero means no limit. Thread-safe.
#ifndef DISTOPT_COMMON_MEMORY_BUDGET_H_
#define DISTOPT_COMMON_MEMORY_BUDGET_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace distopt {

class MemoryBudget;

// Bytes held against a MemoryBudget until destroyed. Move-only.
class Reservation {
 public:
  Reservation() = default;
  Reservation(Reservation&& other) noexcept;
  Reservation& operator=(Reservation&& other) noexcept;
  ~Reservation();

  uint64_t bytes() const { return bytes_; }

 private:
  friend class MemoryBudget;
  Reservation(MemoryBudget* budget, uint64_t bytes)
      : budget_(budget), bytes_(bytes) {}
  void Release();

  MemoryBudget* budget_ = nullptr;
  uint64_t bytes_ = 0;
};

class MemoryBudget {
 public:
  MemoryBudget(uint64_t max_tensor_bytes, uint64_t max_total_bytes);
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Reserves `bytes` for one tensor; `what` names it in the error.
  absl::StatusOr<Reservation> Reserve(uint64_t bytes, absl::string_view what);
  // Reserves `bytes` held by several tensors or other things (an
  // optimizer's state, a forward's saved tensors, store entries): only the
  // total limit applies.
  absl::StatusOr<Reservation> ReserveTotal(uint64_t bytes,
                                           absl::string_view what);
  // Makes `reservation` (of this budget, or empty) hold `bytes`: more is
  // checked against the total limit (RESOURCE_EXHAUSTED naming `what`,
  // and the reservation unchanged), less is given back. INTERNAL, and the
  // reservation unchanged, for a reservation of another budget.
  absl::Status Resize(Reservation& reservation, uint64_t bytes,
                      absl::string_view what);

  uint64_t used_bytes() const;
  uint64_t max_tensor_bytes() const { return max_tensor_bytes_; }
  uint64_t max_total_bytes() const { return max_total_bytes_; }
  // Reservations refused for going past --max_tensor_bytes, and past
  // --max_total_bytes, since the start.
  uint64_t tensor_refusals() const {
    return tensor_refusals_.load(std::memory_order_relaxed);
  }
  uint64_t total_refusals() const {
    return total_refusals_.load(std::memory_order_relaxed);
  }

 private:
  friend class Reservation;
  void Release(uint64_t bytes);

  const uint64_t max_tensor_bytes_;
  const uint64_t max_total_bytes_;
  mutable absl::Mutex mutex_;
  uint64_t used_bytes_ ABSL_GUARDED_BY(mutex_) = 0;
  std::atomic<uint64_t> tensor_refusals_{0};
  std::atomic<uint64_t> total_refusals_{0};
};

}  // namespace distopt

#endif  // DISTOPT_COMMON_MEMORY_BUDGET_H_
