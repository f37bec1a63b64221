#include "server/services/group_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace distopt {

// The longest a Wait or Barrier may block.
constexpr int64_t kMaxWaitMilliseconds = 3600 * 1000;

grpc::Status GroupServiceImpl::GetGroup(grpc::ServerContext*,
                                        const v1::GetGroupRequest*,
                                        v1::GroupInfo* response) {
  response->set_rank(flags_.rank);
  response->set_world_size(flags_.world_size);
  for (const std::string& peer : flags_.peers) response->add_peers(peer);
  response->set_rendezvous(flags_.rendezvous);
  // Groups run their collectives on gloo (the data-parallel optimizers
  // take host parameters).
  response->set_backend("gloo");
  const GroupMembership* membership = membership_->load();
  if (membership == nullptr) {
    response->set_state(flags_.world_size == 1 ? v1::GroupInfo::SINGLE
                                               : v1::GroupInfo::JOINING);
    return grpc::Status::OK;
  }
  switch (membership->state()) {
    case GroupMembership::State::kJoining:
      response->set_state(v1::GroupInfo::JOINING);
      break;
    case GroupMembership::State::kReady:
      response->set_state(v1::GroupInfo::READY);
      break;
    case GroupMembership::State::kFailed:
      response->set_state(v1::GroupInfo::FAILED);
      response->set_error(std::string(membership->error().message()));
      break;
  }
  return grpc::Status::OK;
}

grpc::Status GroupServiceImpl::Barrier(grpc::ServerContext*,
                                       const v1::BarrierRequest* request,
                                       v1::BarrierResponse*) {
  if (request->timeout_ms() < 1 ||
      request->timeout_ms() > kMaxWaitMilliseconds) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("timeout_ms: ", request->timeout_ms(), "; expected 1 to ",
                     kMaxWaitMilliseconds)));
  }
  GroupMembership* membership = membership_->load();
  if (membership == nullptr) {
    if (flags_.world_size == 1) return grpc::Status::OK;  // Alone.
    return ToGrpcStatus(
        absl::UnavailableError("group: the daemon is still starting"));
  }
  return ToGrpcStatus(membership->Run(
      absl::Milliseconds(request->timeout_ms()),
      [](Communicator& communicator) { return communicator.Barrier(); }));
}

grpc::Status GroupServiceImpl::Set(grpc::ServerContext*,
                                   const v1::SetRequest* request,
                                   v1::SetResponse*) {
  return ToGrpcStatus(store_->Set(request->key(), request->value()));
}

grpc::Status GroupServiceImpl::Get(grpc::ServerContext*,
                                   const v1::GetRequest* request,
                                   v1::GetResponse* response) {
  absl::StatusOr<std::string> value = store_->Get(request->key());
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(*std::move(value));
  return grpc::Status::OK;
}

grpc::Status GroupServiceImpl::Wait(grpc::ServerContext*,
                                    const v1::WaitRequest* request,
                                    v1::WaitResponse*) {
  if (request->timeout_ms() < 1 ||
      request->timeout_ms() > kMaxWaitMilliseconds) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("timeout_ms: ", request->timeout_ms(), "; expected 1 to ",
                     kMaxWaitMilliseconds)));
  }
  const std::vector<std::string> keys(request->keys().begin(),
                                      request->keys().end());
  return ToGrpcStatus(
      store_->Wait(keys, absl::Milliseconds(request->timeout_ms())));
}

grpc::Status GroupServiceImpl::Add(grpc::ServerContext*,
                                   const v1::AddRequest* request,
                                   v1::AddResponse* response) {
  absl::StatusOr<int64_t> value = store_->Add(request->key(), request->delta());
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(*value);
  return grpc::Status::OK;
}

}  // namespace distopt
