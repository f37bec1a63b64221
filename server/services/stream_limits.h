// StreamLimits: bounds on the calls that hold a server thread (and buffers)
// for as long as their client likes: the streams a client keeps open
// (StepStream, ReadParameter, WriteParameter, the chunked autograd calls,
// streamed state dicts, Health.Watch) and the calls that wait for other
// ranks (Barrier, Reform, the data-parallel creations and steps).
//
// A call takes a slot for its lifetime: at most `per_connection` at once
// from one connection and `total` in all; past a bound the call is refused
// with RESOURCE_EXHAUSTED naming the bound and its flag, and the calls
// already open go on. The daemon's thread quota (--max_threads) is larger
// than `total` (see ValidateWorkerOptions), so short calls always find a
// thread: a well-behaved client is served while another holds every slot.
// The group's store Waits take no slot, so that strangers filling the slots
// cannot stop the group's rendezvous; only the group's ranks may make them.
//
// A client that stops reading a reply stream, or never sends the rest of
// its request, would hold its slot, thread and buffers forever: a write or
// read that has not completed within `stall_timeout` cancels the call (its
// client sees it cancelled).
//
// A call that serves a stream of requests (StepStream) waits for the next
// one unwatched: such a stream is idle between requests by design. gRPC's
// graceful shutdown waits for every call in flight, so an idle stream would
// hold the daemon up to the grace period: Close() cancels the streams that
// wait for a request at once and lets the ones working on one reply first.
// No request is half served, and none that the daemon accepted goes
// unanswered while the daemon is still up.
//
// Thread-safe. A Slot is used by its call's thread; the watchdog and
// Close() reach it under the lock of StreamLimits, and a streamed request
// or reply takes only its slot's own lock.
#ifndef DISTOPT_SERVER_SERVICES_STREAM_LIMITS_H_
#define DISTOPT_SERVER_SERVICES_STREAM_LIMITS_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"

namespace distopt {

// The defaults of the daemon's flags too.
struct StreamLimitOptions {
  int total = 128;          // --max_streams
  int per_connection = 16;  // --max_streams_per_connection
  absl::Duration stall_timeout = absl::Seconds(30);  // --stream_stall_timeout
};

class StreamLimits {
 public:
  // One call's slot, held for its lifetime.
  class Slot {
   public:
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

    // Around each wait on the client (a reply write, a request read): a
    // wait longer than the stall timeout cancels the call.
    void BeginWait() ABSL_LOCKS_EXCLUDED(mutex_);
    void EndWait() ABSL_LOCKS_EXCLUDED(mutex_);

    // For a call serving a stream of requests, whose loop is
    //   while (slot.AwaitRequest() && read(request) && slot.BeginWork())
    //     { serve(request); write(reply); }
    // AwaitRequest, before reading the next request: false once the daemon
    // is closing (the handler then returns instead of reading).
    bool AwaitRequest() ABSL_LOCKS_EXCLUDED(mutex_);
    // BeginWork, after a request arrived: false when Close() cancelled the
    // call while it waited (the request is then dropped unserved, and the
    // client sees the call cancelled, not a reply).
    bool BeginWork() ABSL_LOCKS_EXCLUDED(mutex_);

   private:
    friend class StreamLimits;
    enum class State { kWorking, kAwaitingRequest, kCancelled };

    Slot(StreamLimits* limits, grpc::ServerContext* context,
         std::string connection)
        : limits_(limits),
          context_(context),
          connection_(std::move(connection)) {}

    StreamLimits* const limits_;
    grpc::ServerContext* const context_;
    const std::string connection_;
    absl::Mutex mutex_;
    State state_ ABSL_GUARDED_BY(mutex_) = State::kWorking;
    // Since when the call waits on its client (InfiniteFuture: it does not).
    absl::Time waiting_since_ ABSL_GUARDED_BY(mutex_) = absl::InfiniteFuture();
  };

  explicit StreamLimits(const StreamLimitOptions& options);
  ~StreamLimits();
  StreamLimits(const StreamLimits&) = delete;
  StreamLimits& operator=(const StreamLimits&) = delete;

  // A slot for `call` (its name, for the message) on `context`'s
  // connection; RESOURCE_EXHAUSTED past a bound.
  absl::StatusOr<std::unique_ptr<Slot>> Acquire(grpc::ServerContext* context,
                                                absl::string_view call)
      ABSL_LOCKS_EXCLUDED(mutex_);

  // Cancels the calls that wait for their next request and refuses the
  // next request of the others (see Slot::AwaitRequest); call before
  // shutting the server down.
  void Close() ABSL_LOCKS_EXCLUDED(mutex_);
  // Streams (and waiting calls) open now.
  size_t open() ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  void Release(Slot* slot) ABSL_LOCKS_EXCLUDED(mutex_);
  void Watch() ABSL_LOCKS_EXCLUDED(mutex_);

  const StreamLimitOptions options_;
  std::atomic<bool> closing_{false};
  // Taken before a slot's own lock.
  absl::Mutex mutex_;
  absl::flat_hash_set<Slot*> slots_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::string, int> per_connection_ ABSL_GUARDED_BY(mutex_);
  absl::Notification stopping_;
  std::thread watchdog_;
};

// A stream whose reads and writes are watched by a slot (see BeginWait).
template <typename Stream>
class WatchedStream {
 public:
  WatchedStream(Stream* stream, StreamLimits::Slot* slot)
      : stream_(stream), slot_(slot) {}
  template <typename Message>
  bool Read(Message* message) {
    slot_->BeginWait();
    const bool read = stream_->Read(message);
    slot_->EndWait();
    return read;
  }
  template <typename Message>
  bool Write(const Message& message) {
    slot_->BeginWait();
    const bool written = stream_->Write(message);
    slot_->EndWait();
    return written;
  }

 private:
  Stream* const stream_;
  StreamLimits::Slot* const slot_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_STREAM_LIMITS_H_
