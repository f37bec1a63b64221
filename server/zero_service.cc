#include "server/zero_service.h"

#include "absl/strings/str_cat.h"
#include "common/chunked_message.h"
#include "common/grpc_status.h"
#include "server/optim/state_dict_proto.h"

namespace distopt {
namespace {

constexpr int64_t kMaxTimeoutMilliseconds = 3600 * 1000;

grpc::Status Reply(const absl::StatusOr<ZeroStatus>& status,
                   v1::ZeroInfo* response) {
  if (!status.ok()) return ToGrpcStatus(status.status());
  for (const auto& [name, rank] : status->owners) {
    v1::ZeroParameterOwner* owner = response->add_owners();
    owner->set_name(name);
    owner->set_rank(rank);
  }
  response->mutable_loads()->Assign(status->loads.begin(), status->loads.end());
  response->set_state_bytes(status->state_bytes);
  response->set_steps(status->steps);
  response->set_parameter_bytes(status->parameter_bytes);
  response->set_gradient_bytes(status->gradient_bytes);
  response->set_kind(status->kind);
  response->set_parameters_as_bucket_view(
      status->options.parameters_as_bucket_view);
  response->set_overlap(status->options.overlap);
  response->set_rank(status->rank);
  response->set_world_size(status->world_size);
  response->set_groups(status->groups);
  response->set_joined(status->joined);
  for (const ZeroRankBytes& bytes : status->ranks) {
    v1::ZeroRankBytes* rank = response->add_ranks();
    rank->set_rank(bytes.rank);
    rank->set_parameter_bytes(bytes.parameter_bytes);
    rank->set_gradient_bytes(bytes.gradient_bytes);
    rank->set_state_bytes(bytes.state_bytes);
    rank->set_steps(bytes.steps);
  }
  return grpc::Status::OK;
}

absl::StatusOr<ZeroGroupSpec> GroupFromProto(const v1::ZeroParamGroup& proto,
                                             const std::string& field) {
  ZeroGroupSpec group;
  absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> values =
      HyperparametersFromProto(proto.hyperparameters(),
                               absl::StrCat(field, ".hyperparameters"));
  if (!values.ok()) return values.status();
  group.hyperparameters = *std::move(values);
  group.parameter_names.assign(proto.parameter_names().begin(),
                               proto.parameter_names().end());
  if (group.parameter_names.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".parameter_names: empty; expected at least one parameter"));
  }
  return group;
}

}  // namespace

grpc::Status ZeroServiceImpl::CreateZero(grpc::ServerContext*,
                                         const v1::CreateZeroRequest* request,
                                         v1::ZeroInfo* response) {
  ZeroSpec spec;
  spec.kind = request->kind();
  spec.options.parameters_as_bucket_view = request->parameters_as_bucket_view();
  spec.options.overlap = request->overlap();
  const int64_t timeout_ms =
      request->timeout_ms() == 0 ? 60000 : request->timeout_ms();
  if (timeout_ms < 1 || timeout_ms > kMaxTimeoutMilliseconds) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("timeout_ms: ", request->timeout_ms(), "; expected 1 to ",
                     kMaxTimeoutMilliseconds, ", or 0 for 60000")));
  }
  spec.timeout = absl::Milliseconds(timeout_ms);
  for (int g = 0; g < request->groups_size(); ++g) {
    absl::StatusOr<ZeroGroupSpec> group =
        GroupFromProto(request->groups(g), absl::StrCat("groups[", g, "]"));
    if (!group.ok()) return ToGrpcStatus(group.status());
    spec.groups.push_back(*std::move(group));
  }
  if (spec.groups.empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "groups: empty; expected at least one parameter group"));
  }
  return Reply(runner_->Create(spec), response);
}

grpc::Status ZeroServiceImpl::Step(grpc::ServerContext*,
                                   const v1::ZeroStepRequest* request,
                                   v1::ZeroStepResponse*) {
  return ToGrpcStatus(runner_->Step(request->context_id()));
}

grpc::Status ZeroServiceImpl::GetZero(grpc::ServerContext*,
                                      const v1::GetZeroRequest*,
                                      v1::ZeroInfo* response) {
  return Reply(runner_->Get(), response);
}

grpc::Status ZeroServiceImpl::Join(grpc::ServerContext*,
                                   const v1::ZeroJoinRequest*,
                                   v1::ZeroJoinResponse* response) {
  absl::StatusOr<int64_t> shadowed = runner_->Join();
  if (!shadowed.ok()) return ToGrpcStatus(shadowed.status());
  response->set_shadowed_steps(*shadowed);
  return grpc::Status::OK;
}

grpc::Status ZeroServiceImpl::AddParamGroup(
    grpc::ServerContext*, const v1::AddZeroParamGroupRequest* request,
    v1::ZeroInfo* response) {
  absl::StatusOr<ZeroGroupSpec> group =
      GroupFromProto(request->group(), "group");
  if (!group.ok()) return ToGrpcStatus(group.status());
  return Reply(runner_->AddParamGroup(*group), response);
}

grpc::Status ZeroServiceImpl::SetHyperparameters(
    grpc::ServerContext*, const v1::SetZeroHyperparametersRequest* request,
    v1::ZeroInfo* response) {
  absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> changes =
      HyperparametersFromProto(request->hyperparameters(), "hyperparameters");
  if (!changes.ok()) return ToGrpcStatus(changes.status());
  return Reply(runner_->SetHyperparameters(request->group(), *changes),
               response);
}

grpc::Status ZeroServiceImpl::ConsolidateStateDict(
    grpc::ServerContext*, const v1::ConsolidateZeroStateDictRequest* request,
    v1::ConsolidateZeroStateDictResponse* response) {
  absl::StatusOr<bool> holds = runner_->ConsolidateStateDict(request->to());
  if (!holds.ok()) return ToGrpcStatus(holds.status());
  response->set_holds_state_dict(*holds);
  return grpc::Status::OK;
}

grpc::Status ZeroServiceImpl::GetStateDict(
    grpc::ServerContext*, const v1::GetZeroStateDictRequest*,
    grpc::ServerWriter<v1::MessageChunk>* writer) {
  absl::StatusOr<NamedStateDict> named = runner_->GetStateDict();
  if (!named.ok()) return ToGrpcStatus(named.status());
  v1::ZeroStateDict proto;
  StateDictToProto(named->state_dict, proto.mutable_state_dict());
  proto.mutable_parameter_names()->Assign(named->parameter_names.begin(),
                                          named->parameter_names.end());
  if (!WriteChunked(proto, writer)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "state_dict: the stream to the caller broke");
  }
  return grpc::Status::OK;
}

grpc::Status ZeroServiceImpl::LoadStateDict(
    grpc::ServerContext*, grpc::ServerReader<v1::MessageChunk>* reader,
    v1::LoadZeroStateDictResponse*) {
  // A dict that does not arrive or convert is still taken to the
  // collective, so the other ranks are refused with it instead of waiting
  // for this one.
  absl::StatusOr<NamedStateDict> named =
      [&]() -> absl::StatusOr<NamedStateDict> {
    v1::ZeroStateDict request;
    absl::Status read = ReadChunked(reader, "state_dict", &request);
    if (!read.ok()) return read;
    absl::StatusOr<OptimizerStateDict> dict =
        StateDictFromProto(request.state_dict());
    if (!dict.ok()) return dict.status();
    NamedStateDict result;
    result.state_dict = *std::move(dict);
    result.parameter_names.assign(request.parameter_names().begin(),
                                  request.parameter_names().end());
    return result;
  }();
  return ToGrpcStatus(runner_->LoadStateDict(named));
}

}  // namespace distopt
