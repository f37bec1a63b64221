#include "server/services/open_streams.h"

namespace distopt {

OpenStreams::Stream::Stream(OpenStreams* streams, grpc::ServerContext* context)
    : streams_(streams), context_(context) {
  absl::MutexLock lock(&streams_->mutex_);
  streams_->streams_[context_] = State::kWorking;
}

OpenStreams::Stream::~Stream() {
  absl::MutexLock lock(&streams_->mutex_);
  streams_->streams_.erase(context_);
}

bool OpenStreams::Stream::AwaitRequest() {
  absl::MutexLock lock(&streams_->mutex_);
  if (streams_->closed_) return false;
  streams_->streams_[context_] = State::kWaiting;
  return true;
}

bool OpenStreams::Stream::BeginWork() {
  absl::MutexLock lock(&streams_->mutex_);
  State& state = streams_->streams_[context_];
  if (state == State::kCancelled) return false;
  state = State::kWorking;
  return true;
}

void OpenStreams::Close() {
  absl::MutexLock lock(&mutex_);
  closed_ = true;
  for (auto& [context, state] : streams_) {
    if (state != State::kWaiting) continue;
    state = State::kCancelled;
    context->TryCancel();
  }
}

}  // namespace distopt
