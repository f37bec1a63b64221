#include "server/services/health_service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "common/quoted.h"

namespace distopt {

using grpc::health::v1::HealthCheckResponse;

void HealthState::Set(const std::string& service, ServingStatus status) {
  absl::MutexLock lock(&mutex_);
  statuses_[service] = status;
}

void HealthState::SetAll(ServingStatus status) {
  absl::MutexLock lock(&mutex_);
  for (auto& entry : statuses_) entry.second = status;
}

void HealthState::Close() {
  absl::MutexLock lock(&mutex_);
  closed_ = true;
}

bool HealthState::Get(const std::string& service, ServingStatus* status) const {
  absl::MutexLock lock(&mutex_);
  auto it = statuses_.find(service);
  if (it == statuses_.end()) return false;
  *status = it->second;
  return true;
}

ServingStatus HealthState::StatusLocked(const std::string& service) const {
  auto it = statuses_.find(service);
  return it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN
                               : it->second;
}

bool HealthState::WaitForChange(const std::string& service, ServingStatus last,
                                const std::function<bool()>& cancelled) const {
  absl::MutexLock lock(&mutex_);
  auto changed_or_closed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return closed_ || StatusLocked(service) != last;
  };
  while (true) {
    // Wake up now and then to notice a client that went away.
    mutex_.AwaitWithTimeout(absl::Condition(&changed_or_closed),
                            absl::Milliseconds(200));
    // Once closed, report a last change (if any) and then stop.
    if (StatusLocked(service) != last) return true;
    if (closed_) return false;
    if (cancelled()) return false;
  }
}

grpc::Status HealthServiceImpl::Check(
    grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest* request,
    HealthCheckResponse* response) {
  ServingStatus status;
  if (!state_->Get(request->service(), &status)) {
    return grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("service: ", Quoted(request->service()),
                     " is not served here; expected \"\" or a distopt.v1 "
                     "service name"));
  }
  response->set_status(status);
  return grpc::Status::OK;
}

grpc::Status HealthServiceImpl::Watch(
    grpc::ServerContext* context,
    const grpc::health::v1::HealthCheckRequest* request,
    grpc::ServerWriter<HealthCheckResponse>* writer) {
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "Watch");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  // A client that stops reading the changes is cut off.
  WatchedStream<grpc::ServerWriter<HealthCheckResponse>> watched(writer,
                                                                 slot->get());
  ServingStatus status;
  if (!state_->Get(request->service(), &status)) {
    status = HealthCheckResponse::SERVICE_UNKNOWN;
  }
  HealthCheckResponse response;
  while (true) {
    response.set_status(status);
    if (!watched.Write(response)) return grpc::Status::OK;
    if (!state_->WaitForChange(request->service(), status,
                               [context] { return context->IsCancelled(); })) {
      return grpc::Status::OK;
    }
    if (!state_->Get(request->service(), &status)) {
      status = HealthCheckResponse::SERVICE_UNKNOWN;
    }
  }
}

}  // namespace distopt
