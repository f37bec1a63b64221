#include "server/comm/piece_handoff.h"

namespace distopt {

PieceHandoff::PieceHandoff(Take take)
    : take_(take), thread_([this] { Run(); }) {}

PieceHandoff::~PieceHandoff() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  thread_.join();
}

void PieceHandoff::Hand(size_t at, absl::Span<const float> values) {
  absl::MutexLock lock(&mu_);
  queue_.emplace_back(at, values);
  ++handed_;
}

size_t PieceHandoff::taken() const {
  absl::MutexLock lock(&mu_);
  return taken_;
}

void PieceHandoff::AwaitTaken(size_t count) const {
  absl::MutexLock lock(&mu_);
  AwaitTakenLocked(count);
}

void PieceHandoff::AwaitTakenLocked(size_t count) const {
  const std::pair<const size_t*, size_t> wait(&taken_, count);
  mu_.Await(absl::Condition(
      +[](const std::pair<const size_t*, size_t>* w) {
        return *w->first >= w->second;
      },
      &wait));
}

void PieceHandoff::Finish() {
  std::exception_ptr failure;
  {
    absl::MutexLock lock(&mu_);
    AwaitTakenLocked(handed_);
    failure = failure_;
  }
  if (failure != nullptr) std::rethrow_exception(failure);
}

bool PieceHandoff::HasWorkOrEnds() const { return closing_ || !queue_.empty(); }

void PieceHandoff::Run() {
  bool failed = false;
  while (true) {
    std::pair<size_t, absl::Span<const float>> piece;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &PieceHandoff::HasWorkOrEnds));
      // Closing drains the queue first: every handed piece is taken.
      if (queue_.empty()) return;
      piece = queue_.front();
      queue_.pop_front();
    }
    // An exception must not leave this thread (that would end the
    // process): it goes to Finish, on the ring's thread.
    std::exception_ptr failure;
    if (!failed) {
      try {
        take_(piece.first, piece.second);
      } catch (...) {
        failure = std::current_exception();
        failed = true;
      }
    }
    absl::MutexLock lock(&mu_);
    if (failure != nullptr) failure_ = failure;
    ++taken_;
  }
}

}  // namespace distopt
