// distopt.v1.StatusService: what the daemon is, and a snapshot of the
// metrics /metrics serves, read from the same collectables.
#ifndef DISTOPT_SERVER_SERVICES_STATUS_SERVICE_H_
#define DISTOPT_SERVER_SERVICES_STATUS_SERVICE_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "proto/distopt/v1/status.grpc.pb.h"

namespace distopt {

class StatusServiceImpl final : public v1::StatusService::Service {
 public:
  // `collectables` are read at every call (the process's registry, the
  // daemon's gauges); they may be gone by then, and are skipped.
  explicit StatusServiceImpl(
      std::vector<std::weak_ptr<prometheus::Collectable>> collectables)
      : collectables_(std::move(collectables)) {}

  // What GetStatus describes, once the daemon knows it (its address comes
  // after the server started).
  void Describe(const v1::WorkerStatus& description)
      ABSL_LOCKS_EXCLUDED(mutex_);

  grpc::Status GetStatus(grpc::ServerContext* context,
                         const v1::GetStatusRequest* request,
                         v1::WorkerStatus* response) override;

 private:
  const std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;
  const absl::Time started_ = absl::Now();
  absl::Mutex mutex_;
  v1::WorkerStatus description_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_STATUS_SERVICE_H_
