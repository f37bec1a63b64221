#include "server/services/zero_service.h"

#include "absl/strings/str_cat.h"
#include "common/collective_timeout.h"
#include "common/grpc_status.h"
#include "server/data_parallel/named_groups_proto.h"
#include "server/optim/wire_optimizer.h"
#include "server/services/bucket_bytes.h"
#include "server/services/caller_identity.h"
#include "server/services/chunked_reply.h"

namespace distopt {
namespace {

// Buckets smaller than a page cost a collective each for little; larger
// than 2 GiB do not fit gloo's byte counts.

grpc::Status Reply(const absl::StatusOr<ZeroInfo>& info,
                   v1::ZeroInfo* response) {
  if (!info.ok()) return ToGrpcStatus(info.status());
  for (const auto& [name, rank] : info->owners) {
    v1::ZeroParameterOwner* owner = response->add_owners();
    owner->set_name(name);
    owner->set_rank(rank);
  }
  response->mutable_loads()->Assign(info->loads.begin(), info->loads.end());
  response->set_state_bytes(info->state_bytes);
  response->set_steps(info->steps);
  response->set_parameter_bytes(info->parameter_bytes);
  response->set_gradient_bytes(info->gradient_bytes);
  response->set_kind(info->kind);
  response->set_parameters_as_bucket_view(
      info->options.parameters_as_bucket_view);
  response->set_overlap(info->options.overlap);
  response->set_gradient_sharded(info->options.gradient_sharded);
  response->set_bucket_bytes(info->options.bucket_bytes);
  response->set_scratch_bytes(info->scratch_bytes);
  response->set_rank(info->rank);
  response->set_world_size(info->world_size);
  response->set_groups(info->groups);
  response->set_joined(info->joined);
  response->set_inconsistent(std::string(info->damage.message()));
  for (const ZeroRankBytes& bytes : info->ranks) {
    v1::ZeroRankBytes* rank = response->add_ranks();
    rank->set_rank(bytes.rank);
    rank->set_parameter_bytes(bytes.parameter_bytes);
    rank->set_gradient_bytes(bytes.gradient_bytes);
    rank->set_state_bytes(bytes.state_bytes);
    rank->set_scratch_bytes(bytes.scratch_bytes);
    rank->set_steps(bytes.steps);
  }
  return grpc::Status::OK;
}

}  // namespace

grpc::Status ZeroServiceImpl::CreateZero(grpc::ServerContext* context,
                                         const v1::CreateZeroRequest* request,
                                         v1::ZeroInfo* response) {
  ZeroSpec spec;
  spec.kind = request->kind();
  spec.options.parameters_as_bucket_view = request->parameters_as_bucket_view();
  spec.options.overlap = request->overlap();
  spec.options.gradient_sharded = request->gradient_sharded();
  absl::StatusOr<int64_t> bucket_bytes = BucketBytes(request->bucket_bytes());
  if (bucket_bytes.ok()) {
    spec.options.bucket_bytes = *bucket_bytes;
  } else {
    spec.refused = bucket_bytes.status();
  }
  absl::StatusOr<absl::Duration> timeout =
      CollectiveTimeout(request->timeout_ms(), "timeout_ms");
  if (!timeout.ok()) return ToGrpcStatus(timeout.status());
  spec.timeout = *timeout;
  absl::StatusOr<std::vector<NamedGroupSpec>> groups =
      NamedGroupsFromProto(request->groups());
  if (groups.ok()) {
    spec.groups = *std::move(groups);
  } else if (spec.refused.ok()) {
    spec.refused = groups.status();
  }
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "CreateZero");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  return Reply(runner_->Create(spec), response);
}

grpc::Status ZeroServiceImpl::Step(grpc::ServerContext* context,
                                   const v1::ZeroStepRequest* request,
                                   v1::ZeroStepResponse*) {
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "Step");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  return ToGrpcStatus(
      runner_->Step(request->context_id(), CallerIdentity(*context)));
}

grpc::Status ZeroServiceImpl::GetZero(grpc::ServerContext*,
                                      const v1::GetZeroRequest*,
                                      v1::ZeroInfo* response) {
  return Reply(runner_->Get(), response);
}

grpc::Status ZeroServiceImpl::Join(grpc::ServerContext* context,
                                   const v1::ZeroJoinRequest*,
                                   v1::ZeroJoinResponse* response) {
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "Join");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  absl::StatusOr<int64_t> shadowed = runner_->Join();
  if (!shadowed.ok()) return ToGrpcStatus(shadowed.status());
  response->set_shadowed_steps(*shadowed);
  return grpc::Status::OK;
}

grpc::Status ZeroServiceImpl::AddParamGroup(
    grpc::ServerContext*, const v1::AddZeroParamGroupRequest* request,
    v1::ZeroInfo* response) {
  absl::StatusOr<NamedGroupSpec> group =
      NamedGroupFromProto(request->group(), "group");
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
    grpc::ServerContext* context, const v1::GetZeroStateDictRequest*,
    grpc::ServerWriter<v1::MessageChunk>* writer) {
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "GetStateDict");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  absl::StatusOr<NamedStateDict> named = runner_->GetStateDict();
  if (!named.ok()) return ToGrpcStatus(named.status());
  v1::ZeroStateDict proto;
  StateDictToProto(named->state_dict, proto.mutable_state_dict());
  proto.mutable_parameter_names()->Assign(named->parameter_names.begin(),
                                          named->parameter_names.end());
  return WriteReplyChunked(proto, writer, "state_dict", slot->get());
}

grpc::Status ZeroServiceImpl::LoadStateDict(
    grpc::ServerContext* context, grpc::ServerReader<v1::MessageChunk>* reader,
    v1::LoadZeroStateDictResponse*) {
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "LoadStateDict");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  // A dict that does not arrive or convert is still taken to the
  // collective, so the other ranks are refused with it instead of waiting
  // for this one.
  absl::StatusOr<NamedStateDict> named =
      [&]() -> absl::StatusOr<NamedStateDict> {
    v1::ZeroStateDict request;
    absl::Status read = ReadRequestChunked(reader, slot->get(), budget_,
                                           "state_dict", &request);
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
