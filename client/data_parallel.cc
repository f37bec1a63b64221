#include "client/data_parallel.h"

#include "client/streamed_calls.h"
#include "common/collective_timeout.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"

namespace distopt {
namespace {

// How long the daemon may wait for the other ranks. A timeout it refuses
// fails at once, so any wait does then.
absl::Duration CollectiveWait(int64_t timeout_ms) {
  return CollectiveTimeout(timeout_ms, "timeout_ms")
      .value_or(absl::Milliseconds(kDefaultCollectiveTimeoutMilliseconds));
}

// One unary call whose daemon may wait `wait` for the other ranks.
template <typename Service, typename Request, typename Response>
absl::Status Call(Client& client, const std::string& worker,
                  absl::string_view name, absl::Duration wait,
                  grpc::Status (Service::Stub::*method)(grpc::ClientContext*,
                                                        const Request&,
                                                        Response*),
                  const Request& request, Response* response) {
  grpc::ClientContext context;
  client.SetDeadline(context, request.ByteSizeLong(), wait);
  typename Service::Stub stub(client.Channel(worker));
  return FromGrpcCall((stub.*method)(&context, request, response), worker,
                      name);
}

template <typename Request>
void SetChanges(int group, const HyperparameterMap& changes, Request* request) {
  request->set_group(group);
  for (const auto& [name, value] : changes) {
    (*request->mutable_hyperparameters())[name] = value;
  }
}

}  // namespace

absl::StatusOr<v1::ZeroInfo> RemoteZero::Create(
    const v1::CreateZeroRequest& request) {
  collective_timeout_ = CollectiveWait(request.timeout_ms());
  v1::ZeroInfo info;
  absl::Status status = Call<v1::ZeroService>(
      *client_, worker_, "CreateZero", collective_timeout_,
      &v1::ZeroService::Stub::CreateZero, request, &info);
  if (!status.ok()) return status;
  return info;
}

absl::Status RemoteZero::Step(uint64_t context_id) {
  v1::ZeroStepRequest request;
  request.set_context_id(context_id);
  v1::ZeroStepResponse response;
  return Call<v1::ZeroService>(*client_, worker_, "Step", collective_timeout_,
                               &v1::ZeroService::Stub::Step, request,
                               &response);
}

absl::StatusOr<int64_t> RemoteZero::Join(absl::Duration wait) {
  v1::ZeroJoinResponse response;
  absl::Status status = Call<v1::ZeroService>(*client_, worker_, "Join", wait,
                                              &v1::ZeroService::Stub::Join,
                                              v1::ZeroJoinRequest(), &response);
  if (!status.ok()) return status;
  return response.shadowed_steps();
}

absl::StatusOr<v1::ZeroInfo> RemoteZero::AddParamGroup(
    const v1::ZeroParamGroup& group) {
  v1::AddZeroParamGroupRequest request;
  *request.mutable_group() = group;
  v1::ZeroInfo info;
  absl::Status status = Call<v1::ZeroService>(
      *client_, worker_, "AddParamGroup", collective_timeout_,
      &v1::ZeroService::Stub::AddParamGroup, request, &info);
  if (!status.ok()) return status;
  return info;
}

absl::StatusOr<v1::ZeroInfo> RemoteZero::SetHyperparameters(
    int group, const HyperparameterMap& changes) {
  v1::SetZeroHyperparametersRequest request;
  SetChanges(group, changes, &request);
  v1::ZeroInfo info;
  absl::Status status = Call<v1::ZeroService>(
      *client_, worker_, "SetHyperparameters", collective_timeout_,
      &v1::ZeroService::Stub::SetHyperparameters, request, &info);
  if (!status.ok()) return status;
  return info;
}

absl::StatusOr<bool> RemoteZero::ConsolidateStateDict(int to) {
  v1::ConsolidateZeroStateDictRequest request;
  request.set_to(to);
  v1::ConsolidateZeroStateDictResponse response;
  absl::Status status = Call<v1::ZeroService>(
      *client_, worker_, "ConsolidateStateDict", collective_timeout_,
      &v1::ZeroService::Stub::ConsolidateStateDict, request, &response);
  if (!status.ok()) return status;
  return response.holds_state_dict();
}

absl::StatusOr<v1::ZeroStateDict> RemoteZero::GetStateDict() {
  v1::ZeroStateDict dict;
  absl::Status status = GetStreamed<v1::ZeroService>(
      *client_, worker_, &v1::ZeroService::Stub::GetStateDict,
      v1::GetZeroStateDictRequest(), &dict);
  if (!status.ok()) return status;
  return dict;
}

absl::Status RemoteZero::LoadStateDict(const v1::ZeroStateDict& state_dict) {
  v1::LoadZeroStateDictResponse response;
  return PutStreamed<v1::ZeroService>(*client_, worker_, collective_timeout_,
                                      &v1::ZeroService::Stub::LoadStateDict,
                                      state_dict, &response);
}

absl::StatusOr<v1::ZeroInfo> RemoteZero::Get() {
  v1::ZeroInfo info;
  absl::Status status = Call<v1::ZeroService>(
      *client_, worker_, "GetZero", absl::ZeroDuration(),
      &v1::ZeroService::Stub::GetZero, v1::GetZeroRequest(), &info);
  if (!status.ok()) return status;
  return info;
}

absl::StatusOr<v1::PostLocalSgdInfo> RemoteLocalSgd::Create(
    const v1::CreatePostLocalSgdRequest& request) {
  collective_timeout_ = CollectiveWait(request.timeout_ms());
  v1::PostLocalSgdInfo info;
  absl::Status status = Call<v1::LocalSgdService>(
      *client_, worker_, "CreatePostLocalSgd", collective_timeout_,
      &v1::LocalSgdService::Stub::CreatePostLocalSgd, request, &info);
  if (!status.ok()) return status;
  return info;
}

absl::StatusOr<int> RemoteLocalSgd::Step(uint64_t context_id) {
  v1::PostLocalSgdStepRequest request;
  request.set_context_id(context_id);
  v1::PostLocalSgdStepResponse response;
  absl::Status status = Call<v1::LocalSgdService>(
      *client_, worker_, "Step", collective_timeout_,
      &v1::LocalSgdService::Stub::Step, request, &response);
  if (!status.ok()) return status;
  return response.averaged_group_size();
}

absl::StatusOr<v1::PostLocalSgdInfo> RemoteLocalSgd::SetHyperparameters(
    int group, const HyperparameterMap& changes) {
  v1::SetZeroHyperparametersRequest request;
  SetChanges(group, changes, &request);
  v1::PostLocalSgdInfo info;
  absl::Status status = Call<v1::LocalSgdService>(
      *client_, worker_, "SetHyperparameters", collective_timeout_,
      &v1::LocalSgdService::Stub::SetHyperparameters, request, &info);
  if (!status.ok()) return status;
  return info;
}

absl::StatusOr<v1::PostLocalSgdInfo> RemoteLocalSgd::Get() {
  v1::PostLocalSgdInfo info;
  absl::Status status = Call<v1::LocalSgdService>(
      *client_, worker_, "GetPostLocalSgd", absl::ZeroDuration(),
      &v1::LocalSgdService::Stub::GetPostLocalSgd, v1::GetPostLocalSgdRequest(),
      &info);
  if (!status.ok()) return status;
  return info;
}

absl::StatusOr<v1::PostLocalSgdStateDict> RemoteLocalSgd::GetStateDict() {
  v1::PostLocalSgdStateDict dict;
  absl::Status status = GetStreamed<v1::LocalSgdService>(
      *client_, worker_, &v1::LocalSgdService::Stub::GetStateDict,
      v1::GetPostLocalSgdStateDictRequest(), &dict);
  if (!status.ok()) return status;
  return dict;
}

absl::StatusOr<std::vector<std::string>> RemoteLocalSgd::LoadStateDict(
    const v1::PostLocalSgdStateDict& state_dict) {
  v1::LoadPostLocalSgdStateDictResponse response;
  absl::Status status = PutStreamed<v1::LocalSgdService>(
      *client_, worker_, absl::ZeroDuration(),
      &v1::LocalSgdService::Stub::LoadStateDict, state_dict, &response);
  if (!status.ok()) return status;
  return std::vector<std::string>(response.warnings().begin(),
                                  response.warnings().end());
}

}  // namespace distopt
