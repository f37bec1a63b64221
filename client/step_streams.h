// Optimizer steps over long-lived OptimizerService.StepStream calls.
//
// A unary Step pays for a new HTTP/2 stream, its headers and trailers, and
// a hand-off between threads on every call; a step sent over a stream that
// stays open pays for two small messages, read by the stepping thread
// itself. StepStreams keeps a pool of open streams per worker (one per step
// in flight to that worker at once), sends the steps of one
// DistributedOptimizer.step to all workers before it waits for any reply
// (no thread per worker), and bounds each step by a deadline that a
// watchdog enforces (a stream's own gRPC deadline covers its whole life).
//
// An open stream holds one daemon thread while it waits for the next step
// (gRPC's synchronous server), and counts against the daemon's stream
// limits (--max_streams_per_connection, 16 by default, covers this
// client's reads and writes to it too). So a client opens no more streams
// to a worker than it has steps in flight to it at once, and at most
// kMaxOpenPerWorker: a step beyond them goes as a unary call. A stream
// left idle for kIdleLife is closed when the worker is next stepped.
//
// A stream that broke while idle (a daemon restarted or shut down) shows
// only when the next step is sent on it; that step is then sent once more
// on a fresh stream. Resending is safe because a daemon applies a step of
// one (optimizer, context) at most once.
#ifndef DISTOPT_CLIENT_STEP_STREAMS_H_
#define DISTOPT_CLIENT_STEP_STREAMS_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "proto/distopt/v1/optimizer.grpc.pb.h"

namespace distopt {

class StepStreams {
 public:
  struct Target {
    std::string worker;
    uint64_t optimizer_id = 0;
  };
  // The channel to a worker; asked only when a new stream is opened.
  using ChannelFor =
      std::function<std::shared_ptr<grpc::Channel>(const std::string& worker)>;

  // Each step must be answered within `timeout`.
  StepStreams(absl::Duration timeout, ChannelFor channel_for);
  // Closes every open stream.
  ~StepStreams();
  StepStreams(const StepStreams&) = delete;
  StepStreams& operator=(const StepStreams&) = delete;

  // Steps every target with the gradients of `context_id`, all at once.
  // One result per target, in order; an error names the worker and says
  // why (the daemon's code and message, a broken stream, or the deadline).
  std::vector<absl::StatusOr<v1::StepResponse>> StepAll(
      const std::vector<Target>& targets, uint64_t context_id);

 private:
  class Call;
  class Watchdog;

  static constexpr int kMaxOpenPerWorker = 8;
  static constexpr absl::Duration kIdleLife = absl::Seconds(30);

  // An idle stream to the target's worker (unless `fresh`), or a new one;
  // null when kMaxOpenPerWorker are open (the step goes unary).
  std::unique_ptr<Call> Take(const Target& target, bool fresh);
  // Back to the idle ones, after a step it served.
  void Return(std::unique_ptr<Call> call);
  // Closes a broken one.
  void Drop(std::unique_ptr<Call> call);
  // The worker's streams idle for kIdleLife, no longer counted open.
  std::vector<std::unique_ptr<Call>> TakeStaleLocked(const std::string& worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::StatusOr<v1::StepResponse> UnaryStep(const Target& target,
                                             uint64_t context_id);

  const absl::Duration timeout_;
  const ChannelFor channel_for_;
  const std::unique_ptr<Watchdog> watchdog_;
  absl::Mutex mutex_;
  // Idle open streams by worker address.
  absl::flat_hash_map<std::string, std::vector<std::unique_ptr<Call>>> idle_
      ABSL_GUARDED_BY(mutex_);
  // Streams open to each worker, idle or serving a step.
  absl::flat_hash_map<std::string, int> open_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace distopt

#endif  // DISTOPT_CLIENT_STEP_STREAMS_H_
