// PieceHandoff: a ring's reduced pieces handed to their consumer on a
// thread of its own, so that the ring goes on receiving and adding the
// next pieces while the consumer (an optimizer stepping the elements a
// piece covers) works on the last one. One after the other on the ring's
// thread, the two leave the transfer idle while the step runs, and a
// step of the whole model is their sum; side by side it is about the
// larger of the two.
//
// A piece stays where it arrived (a ring chunk) until taken: the ring
// re-posts a chunk only once taken() counts its piece.
#ifndef DISTOPT_SERVER_COMM_PIECE_HANDOFF_H_
#define DISTOPT_SERVER_COMM_PIECE_HANDOFF_H_

#include <cstddef>
#include <deque>
#include <exception>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace distopt {

class PieceHandoff {
 public:
  using Take =
      absl::FunctionRef<void(size_t at, absl::Span<const float> values)>;

  // `take` must outlive this object; it is called for each handed piece,
  // in order, one at a time, on this object's thread.
  explicit PieceHandoff(Take take);
  // Returns once every handed piece is taken (also when the ring failed
  // halfway: the pieces handed were complete), so that `take`'s captures
  // and the pieces' memory may go.
  ~PieceHandoff();
  PieceHandoff(const PieceHandoff&) = delete;
  PieceHandoff& operator=(const PieceHandoff&) = delete;

  // Queues a piece; `values` must stay valid until taken() counts it.
  void Hand(size_t at, absl::Span<const float> values) ABSL_LOCKS_EXCLUDED(mu_);
  // How many pieces have been taken so far.
  size_t taken() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until at least `count` pieces have been taken (`count` must not
  // exceed the pieces handed).
  void AwaitTaken(size_t count) const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until every handed piece is taken, then throws here, on the
  // caller's thread, what a take threw (the first; the pieces after it
  // are counted as taken without being taken, so that the ring goes on to
  // its end, and then fails as it did when it called take itself).
  void Finish() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void AwaitTakenLocked(size_t count) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasWorkOrEnds() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const Take take_;
  mutable absl::Mutex mu_;
  std::deque<std::pair<size_t, absl::Span<const float>>> queue_
      ABSL_GUARDED_BY(mu_);
  size_t handed_ ABSL_GUARDED_BY(mu_) = 0;
  size_t taken_ ABSL_GUARDED_BY(mu_) = 0;
  std::exception_ptr failure_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_PIECE_HANDOFF_H_
