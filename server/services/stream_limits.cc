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
  if (open_ >= options_.total) {
    return absl::ResourceExhaustedError(
        absl::StrCat(call, ": ", open_,
                     " streams are open on this daemon; expected at most ",
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
  ++open_;
  return std::unique_ptr<Slot>(new Slot(this, context, std::move(connection)));
}

StreamLimits::Slot::~Slot() { limits_->Release(*this); }

void StreamLimits::Release(const Slot& slot) {
  absl::MutexLock lock(&mutex_);
  waiting_.erase(slot.context_);
  --open_;
  auto it = per_connection_.find(slot.connection_);
  if (--it->second == 0) per_connection_.erase(it);
}

void StreamLimits::Slot::BeginWait() {
  absl::MutexLock lock(&limits_->mutex_);
  limits_->waiting_[context_] = absl::Now();
}

void StreamLimits::Slot::EndWait() {
  absl::MutexLock lock(&limits_->mutex_);
  limits_->waiting_.erase(context_);
}

int StreamLimits::open() const {
  absl::MutexLock lock(&mutex_);
  return open_;
}

void StreamLimits::Watch() {
  const absl::Duration period = std::clamp(
      options_.stall_timeout / 4, absl::Milliseconds(50), absl::Seconds(1));
  while (!stopping_.WaitForNotificationWithTimeout(period)) {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mutex_);
    for (const auto& [context, since] : waiting_) {
      // Unblocks the read or write; the handler then ends the call.
      if (now - since > options_.stall_timeout) context->TryCancel();
    }
  }
}

}  // namespace distopt
