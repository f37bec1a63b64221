// grpc.health.v1.Health, implemented here (rather than gRPC's built-in one)
// so that server reflection can describe it.
//
// HealthState holds the serving status of the whole server ("") and of each
// named service; the daemon flips them to SERVING when ready and to
// NOT_SERVING when it begins to shut down. Watch streams follow every
// change and end when the state is closed; each holds a StreamLimits slot,
// as it holds a server thread for as long as its client stays.
// Thread-safe.
#ifndef DISTOPT_SERVER_SERVICES_HEALTH_SERVICE_H_
#define DISTOPT_SERVER_SERVICES_HEALTH_SERVICE_H_

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/services/stream_limits.h"

namespace distopt {

using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

class HealthState {
 public:
  // Registers `service` ("" is the whole server) with `status`, or updates it.
  void Set(const std::string& service, ServingStatus status)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Sets every registered service to `status`.
  void SetAll(ServingStatus status) ABSL_LOCKS_EXCLUDED(mutex_);
  // Ends every Watch stream (after it has sent the latest status).
  void Close() ABSL_LOCKS_EXCLUDED(mutex_);

  // False when `service` is not registered.
  bool Get(const std::string& service, ServingStatus* status) const
      ABSL_LOCKS_EXCLUDED(mutex_);

  // Blocks until the status of `service` differs from `last`, the state is
  // closed, or `cancelled()` turns true (polled). Returns false once closed
  // or cancelled.
  bool WaitForChange(const std::string& service, ServingStatus last,
                     const std::function<bool()>& cancelled) const
      ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  ServingStatus StatusLocked(const std::string& service) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, ServingStatus> statuses_
      ABSL_GUARDED_BY(mutex_);
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;
};

class HealthServiceImpl final : public grpc::health::v1::Health::Service {
 public:
  // Both must outlive the service.
  HealthServiceImpl(HealthState* state, StreamLimits* streams)
      : state_(state), streams_(streams) {}

  // NOT_FOUND for a service that was never registered, as the protocol says.
  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override;
  // Sends the current status (SERVICE_UNKNOWN for an unregistered service),
  // then every change, until the client cancels or the server shuts down.
  // RESOURCE_EXHAUSTED when no stream slot is free.
  grpc::Status Watch(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>*
                         writer) override;

 private:
  HealthState* const state_;
  StreamLimits* const streams_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_HEALTH_SERVICE_H_
