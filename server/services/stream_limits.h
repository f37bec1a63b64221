// StreamLimits: bounds on the calls that hold a server thread (and buffers)
// for as long as their client likes: the streams a client keeps open
// (StepStream, ReadParameter, WriteParameter, the chunked autograd calls,
// streamed state dicts) and the calls that wait for other ranks (Barrier,
// Reform, the data-parallel creations and steps).
//
// A call takes a slot for its lifetime: at most `per_connection` at once
// from one connection and `total` in all; past a bound the call is refused
// with RESOURCE_EXHAUSTED naming the bound and its flag, and the calls
// already open go on. The daemon's thread quota (--max_threads) is larger
// than `total`, so short calls always find a thread: a well-behaved client
// is served while another holds every slot.
//
// A client that stops reading a reply stream, or never sends the rest of
// its request, would hold its slot, thread and buffers forever: a write or
// read that has not completed within `stall_timeout` cancels the call (its
// client sees it cancelled). A StepStream's wait for its next request is
// not watched: an open step stream is idle between steps by design. The
// group's members (the store's Wait) take no slot: a stranger cannot
// starve the group's rendezvous. Thread-safe.
#ifndef DISTOPT_SERVER_SERVICES_STREAM_LIMITS_H_
#define DISTOPT_SERVER_SERVICES_STREAM_LIMITS_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"

namespace distopt {

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
    void BeginWait();
    void EndWait();

   private:
    friend class StreamLimits;
    Slot(StreamLimits* limits, grpc::ServerContext* context,
         std::string connection)
        : limits_(limits),
          context_(context),
          connection_(std::move(connection)) {}

    StreamLimits* const limits_;
    grpc::ServerContext* const context_;
    const std::string connection_;
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

  int open() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  void Release(const Slot& slot) ABSL_LOCKS_EXCLUDED(mutex_);
  void Watch();

  const StreamLimitOptions options_;
  mutable absl::Mutex mutex_;
  int open_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::flat_hash_map<std::string, int> per_connection_ ABSL_GUARDED_BY(mutex_);
  // The calls waiting on their client now, since when.
  absl::flat_hash_map<grpc::ServerContext*, absl::Time> waiting_
      ABSL_GUARDED_BY(mutex_);
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
