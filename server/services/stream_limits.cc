#include "server/services/stream_limits.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace distopt {

StreamLimits::StreamLimits(const StreamLimitOptions& options)
    : options_(options), watchdog_([this] { Watch(); }) {}

StreamLimits::~StreamLimits() {
  stopping_.Notify();
  watchdog_.join();
}

absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> StreamLimits::Acquire(
    grpc::ServerContext* context, absl::string_view call) {
  // The peer's address and port: one connection.
  std::string connection = context->peer();
  absl::MutexLock lock(&mutex_);
  const int open = static_cast<int>(slots_.size());
  if (open >= options_.total) {
    return absl::ResourceExhaustedError(absl::StrCat(
        call, ": ", open, " streams are open on this daemon; expected at most ",
        options_.total, " (--max_streams)"));
  }
  int& mine = per_connection_[connection];
  if (mine >= options_.per_connection) {
    return absl::ResourceExhaustedError(absl::StrCat(
        call, ": ", mine,
        " streams are open on this connection; expected at most ",
        options_.per_connection, " (--max_streams_per_connection)"));
  }
  ++mine;
  std::unique_ptr<Slot> slot(new Slot(this, context, std::move(connection)));
  slots_.insert(slot.get());
  return slot;
}

StreamLimits::Slot::~Slot() { limits_->Release(this); }

size_t StreamLimits::open() {
  absl::MutexLock lock(&mutex_);
  return slots_.size();
}

void StreamLimits::Release(Slot* slot) {
  absl::MutexLock lock(&mutex_);
  slots_.erase(slot);
  auto it = per_connection_.find(slot->connection_);
  if (--it->second == 0) per_connection_.erase(it);
}

void StreamLimits::Slot::BeginWait() {
  absl::MutexLock lock(&mutex_);
  waiting_since_ = absl::Now();
}

void StreamLimits::Slot::EndWait() {
  absl::MutexLock lock(&mutex_);
  waiting_since_ = absl::InfiniteFuture();
}

bool StreamLimits::Slot::AwaitRequest() {
  absl::MutexLock lock(&mutex_);
  // Read under the slot's lock: Close() sets it before it visits the slots,
  // so either it sees this slot awaiting a request or this sees it closing.
  if (limits_->closing_.load()) return false;
  state_ = State::kAwaitingRequest;
  return true;
}

bool StreamLimits::Slot::BeginWork() {
  absl::MutexLock lock(&mutex_);
  if (state_ == State::kCancelled) return false;
  state_ = State::kWorking;
  return true;
}

void StreamLimits::Close() {
  closing_.store(true);
  absl::MutexLock lock(&mutex_);
  for (Slot* slot : slots_) {
    absl::MutexLock slot_lock(&slot->mutex_);
    if (slot->state_ != Slot::State::kAwaitingRequest) continue;
    slot->state_ = Slot::State::kCancelled;
    slot->context_->TryCancel();
  }
}

void StreamLimits::Watch() {
  const absl::Duration period = std::clamp(
      options_.stall_timeout / 4, absl::Milliseconds(50), absl::Seconds(1));
  while (!stopping_.WaitForNotificationWithTimeout(period)) {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mutex_);
    for (Slot* slot : slots_) {
      absl::MutexLock slot_lock(&slot->mutex_);
      // Unblocks the read or write; the handler then ends the call.
      if (now - slot->waiting_since_ > options_.stall_timeout) {
        slot->context_->TryCancel();
      }
    }
  }
}

}  // namespace distopt
