#include "common/memory_budget.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace distopt {

Reservation::Reservation(Reservation&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

Reservation& Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Reservation::~Reservation() { Release(); }

void Reservation::Release() {
  if (budget_ != nullptr) budget_->Release(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

MemoryBudget::MemoryBudget(uint64_t max_tensor_bytes, uint64_t max_total_bytes)
    : max_tensor_bytes_(max_tensor_bytes), max_total_bytes_(max_total_bytes) {}

absl::StatusOr<Reservation> MemoryBudget::Reserve(uint64_t bytes,
                                                  absl::string_view what) {
  if (max_tensor_bytes_ != 0 && bytes > max_tensor_bytes_) {
    tensor_refusals_.fetch_add(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", bytes, " bytes; expected at most ",
                     max_tensor_bytes_, " (--max_tensor_bytes)"));
  }
  return ReserveTotal(bytes, what);
}

absl::StatusOr<Reservation> MemoryBudget::ReserveTotal(uint64_t bytes,
                                                       absl::string_view what) {
  absl::MutexLock lock(&mutex_);
  if (max_total_bytes_ != 0 && bytes > max_total_bytes_ - used_bytes_) {
    total_refusals_.fetch_add(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": ", bytes, " more bytes would exceed --max_total_bytes=",
        max_total_bytes_, " (", used_bytes_, " in use); expected at most ",
        max_total_bytes_ - used_bytes_));
  }
  used_bytes_ += bytes;
  return Reservation(this, bytes);
}

absl::Status MemoryBudget::Resize(Reservation& reservation, uint64_t bytes,
                                  absl::string_view what) {
  if (reservation.budget_ != nullptr && reservation.budget_ != this) {
    return absl::InternalError(
        absl::StrCat(what, ": resized against a budget it was not taken from"));
  }
  if (bytes <= reservation.bytes_) {
    if (reservation.budget_ == this) Release(reservation.bytes_ - bytes);
    reservation.bytes_ = bytes;
    return absl::OkStatus();
  }
  absl::StatusOr<Reservation> more =
      ReserveTotal(bytes - reservation.bytes_, what);
  if (!more.ok()) return more.status();
  // The two become one reservation of `bytes`.
  more->budget_ = nullptr;
  more->bytes_ = 0;
  reservation.budget_ = this;
  reservation.bytes_ = bytes;
  return absl::OkStatus();
}

uint64_t MemoryBudget::used_bytes() const {
  absl::MutexLock lock(&mutex_);
  return used_bytes_;
}

void MemoryBudget::Release(uint64_t bytes) {
  absl::MutexLock lock(&mutex_);
  used_bytes_ -= bytes;
}

}  // namespace distopt
