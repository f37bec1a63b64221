// The long-lived request streams a daemon serves (StepStream), so that its
// shutdown can end them. gRPC's graceful shutdown waits for every call in
// flight, and a stream whose client keeps it open for the next step would
// hold the daemon up to the grace period. Close() instead cancels the
// streams that wait for a request at once and lets the ones that are
// working on one reply first: no request is half served, and none that the
// daemon accepted goes unanswered while the daemon is still up.
#ifndef DISTOPT_SERVER_SERVICES_OPEN_STREAMS_H_
#define DISTOPT_SERVER_SERVICES_OPEN_STREAMS_H_

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server_context.h"

namespace distopt {

class OpenStreams {
 public:
  // One stream's handler, registered for its lifetime. Its loop is:
  //   while (stream.AwaitRequest() && read(request) && stream.BeginWork())
  //     { serve(request); write(reply); }
  class Stream {
   public:
    Stream(OpenStreams* streams, grpc::ServerContext* context);
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    // Before reading the next request: false when the daemon is closing
    // (the handler then returns instead of reading).
    bool AwaitRequest();
    // After a request arrived: false when Close() cancelled the stream
    // while it waited (the request is then dropped unserved, and the
    // client sees the stream cancelled, not a reply).
    bool BeginWork();

   private:
    OpenStreams* const streams_;
    grpc::ServerContext* const context_;
  };

  // Cancels the idle streams and refuses new requests on the others.
  void Close();

 private:
  enum class State { kWorking, kWaiting, kCancelled };

  absl::Mutex mutex_;
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;
  absl::flat_hash_map<grpc::ServerContext*, State> streams_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_OPEN_STREAMS_H_
