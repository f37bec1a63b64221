#include "server/services/group_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/collective_timeout.h"
#include "common/group_secret.h"
#include "common/grpc_status.h"
#include "server/services/metadata_secret.h"

namespace distopt {
namespace {

// A Wait or Barrier blocks at most as long as a collective may, and says
// how long: it has no default.
absl::Status ValidateWait(int64_t timeout_ms) {
  if (timeout_ms < 1 || timeout_ms > kMaxCollectiveTimeoutMilliseconds) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_ms: ", timeout_ms, "; expected 1 to ",
                     kMaxCollectiveTimeoutMilliseconds));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GroupServiceImpl::CheckMember(
    const grpc::ServerContext& context) const {
  if (flags_.secret.empty()) {
    return absl::PermissionDeniedError(
        "group store: this daemon has no group secret (--group_secret_file); "
        "its store serves no one");
  }
  switch (CheckSecret(context.client_metadata(), kGroupSecretMetadata,
                      flags_.secret)) {
    case SecretCheck::kMatches:
      return absl::OkStatus();
    case SecretCheck::kMissing:
    case SecretCheck::kRepeated:
      return absl::PermissionDeniedError(absl::StrCat(
          "group store: only the ranks of the group may use it; "
          "expected one \"",
          kGroupSecretMetadata, "\" metadata with the group's secret"));
    case SecretCheck::kWrong:
      break;
  }
  return absl::PermissionDeniedError(
      absl::StrCat("group store: the \"", kGroupSecretMetadata,
                   "\" metadata is not this group's secret"));
}

void GroupServiceImpl::DescribeGroup(v1::GroupInfo* response) const {
  response->set_rank(flags_.rank);
  response->set_world_size(flags_.world_size);
  for (const std::string& peer : flags_.peers) response->add_peers(peer);
  response->set_rendezvous(flags_.rendezvous);
  const GroupMembership* membership = membership_->load();
  if (membership == nullptr) {
    response->set_state(flags_.world_size == 1 ? v1::GroupInfo::SINGLE
                                               : v1::GroupInfo::JOINING);
    return;
  }
  // What the last connected round chose from the ranks' devices.
  response->set_backend(membership->tensor_backend());
  response->set_round(membership->round());
  for (int rank : membership->lost_ranks()) response->add_lost_ranks(rank);
  for (const RankReplacement& replaced : membership->replacements()) {
    v1::RankReplacement* out = response->add_replacements();
    out->set_rank(replaced.rank);
    out->set_previous_address(replaced.previous_address);
    out->set_address(replaced.address);
    out->set_round(replaced.round);
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
}

grpc::Status GroupServiceImpl::GetGroup(grpc::ServerContext*,
                                        const v1::GetGroupRequest*,
                                        v1::GroupInfo* response) {
  DescribeGroup(response);
  return grpc::Status::OK;
}

grpc::Status GroupServiceImpl::Barrier(grpc::ServerContext* context,
                                       const v1::BarrierRequest* request,
                                       v1::BarrierResponse*) {
  absl::Status valid = ValidateWait(request->timeout_ms());
  if (!valid.ok()) return ToGrpcStatus(valid);
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "Barrier");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
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

grpc::Status GroupServiceImpl::Reform(grpc::ServerContext* context,
                                      const v1::ReformRequest* request,
                                      v1::GroupInfo* response) {
  absl::StatusOr<absl::Duration> timeout =
      CollectiveTimeout(request->timeout_ms(), "timeout_ms");
  if (!timeout.ok()) return ToGrpcStatus(timeout.status());
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "Reform");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  GroupMembership* membership = membership_->load();
  if (membership == nullptr) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        flags_.world_size == 1
            ? "group: this daemon is not in a data-parallel group"
            : "group: the daemon is still starting"));
  }
  absl::Status status = membership->Reform(*timeout);
  if (!status.ok()) return ToGrpcStatus(status);
  DescribeGroup(response);
  return grpc::Status::OK;
}

grpc::Status GroupServiceImpl::Set(grpc::ServerContext* context,
                                   const v1::SetRequest* request,
                                   v1::SetResponse*) {
  absl::Status member = CheckMember(*context);
  if (!member.ok()) return ToGrpcStatus(member);
  return ToGrpcStatus(store_->Set(request->key(), request->value()));
}

grpc::Status GroupServiceImpl::Get(grpc::ServerContext* context,
                                   const v1::GetRequest* request,
                                   v1::GetResponse* response) {
  absl::Status member = CheckMember(*context);
  if (!member.ok()) return ToGrpcStatus(member);
  absl::StatusOr<std::string> value = store_->Get(request->key());
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(*std::move(value));
  return grpc::Status::OK;
}

grpc::Status GroupServiceImpl::Wait(grpc::ServerContext* context,
                                    const v1::WaitRequest* request,
                                    v1::WaitResponse*) {
  // Members only, and at most KeyValueStore::kMaxWaiters at once: no slot,
  // so that strangers filling the slots cannot stop the group's rendezvous.
  absl::Status member = CheckMember(*context);
  if (!member.ok()) return ToGrpcStatus(member);
  absl::Status valid = ValidateWait(request->timeout_ms());
  if (!valid.ok()) return ToGrpcStatus(valid);
  const std::vector<std::string> keys(request->keys().begin(),
                                      request->keys().end());
  // A caller that cancels or runs out of deadline frees its thread at once.
  return ToGrpcStatus(
      store_->Wait(keys, absl::Milliseconds(request->timeout_ms()),
                   [context] { return context->IsCancelled(); }));
}

grpc::Status GroupServiceImpl::Add(grpc::ServerContext* context,
                                   const v1::AddRequest* request,
                                   v1::AddResponse* response) {
  absl::Status member = CheckMember(*context);
  if (!member.ok()) return ToGrpcStatus(member);
  absl::StatusOr<int64_t> value = store_->Add(request->key(), request->delta());
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(*value);
  return grpc::Status::OK;
}

grpc::Status GroupServiceImpl::Delete(grpc::ServerContext* context,
                                      const v1::DeleteRequest* request,
                                      v1::DeleteResponse* response) {
  absl::Status member = CheckMember(*context);
  if (!member.ok()) return ToGrpcStatus(member);
  response->set_deleted(store_->Delete(request->key()));
  return grpc::Status::OK;
}

}  // namespace distopt
