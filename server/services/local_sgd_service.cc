#include "server/services/local_sgd_service.h"

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

grpc::Status Reply(const absl::StatusOr<LocalSgdInfo>& info,
                   v1::PostLocalSgdInfo* response) {
  if (!info.ok()) return ToGrpcStatus(info.status());
  response->set_kind(info->kind);
  response->set_rank(info->rank);
  response->set_world_size(info->world_size);
  response->set_step(info->step);
  const Averaging& next = info->next_averaging;
  response->set_next_averaging_step(next.step);
  response->set_next_averaging_group_size(next.group_size);
  if (next.group_size > 0) {
    const int first = info->rank / next.group_size * next.group_size;
    for (int r = first; r < first + next.group_size; ++r) {
      response->add_next_averaging_ranks(r);
    }
  }
  response->set_next_gradient_group_size(info->next_gradient_group_size);
  for (const std::string& warning : info->warnings) {
    response->add_warnings(warning);
  }
  response->set_inconsistent(std::string(info->damage.message()));
  response->set_bucket_bytes(info->bucket_bytes);
  return grpc::Status::OK;
}

absl::StatusOr<LocalSgdSpec> SpecFromProto(
    const v1::CreatePostLocalSgdRequest& request) {
  LocalSgdSpec spec;
  spec.kind = request.kind();
  absl::StatusOr<absl::Duration> timeout =
      CollectiveTimeout(request.timeout_ms(), "timeout_ms");
  if (!timeout.ok()) return timeout.status();
  spec.timeout = *timeout;
  absl::StatusOr<std::vector<NamedGroupSpec>> groups =
      NamedGroupsFromProto(request.groups());
  if (!groups.ok()) return groups.status();
  spec.groups = *std::move(groups);
  AveragerSpec& averager = spec.options.averager;
  switch (request.averager_case()) {
    case v1::CreatePostLocalSgdRequest::kPeriodic:
      averager.kind = AveragerSpec::Kind::kPeriodic;
      averager.periods = {{request.periodic().period(), 0}};
      averager.warmup_steps = request.periodic().warmup_steps();
      break;
    case v1::CreatePostLocalSgdRequest::kHierarchical:
      averager.kind = AveragerSpec::Kind::kHierarchical;
      for (const v1::AveragerPeriod& period :
           request.hierarchical().periods()) {
        averager.periods.emplace_back(period.period(), period.group_size());
      }
      averager.warmup_steps = request.hierarchical().warmup_steps();
      break;
    default:
      return absl::InvalidArgumentError(
          "averager: not set; expected periodic or hierarchical");
  }
  spec.options.start_localsgd_iter = request.start_localsgd_iter();
  spec.options.post_local_gradient_allreduce =
      !request.no_post_local_gradient_allreduce();
  spec.options.subgroup_size = request.subgroup_size();
  absl::StatusOr<int64_t> bucket_bytes = BucketBytes(request.bucket_bytes());
  if (!bucket_bytes.ok()) return bucket_bytes.status();
  spec.options.bucket_bytes = *bucket_bytes;
  if (request.subgroup_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("subgroup_size: ", request.subgroup_size(),
                     "; expected a divisor of the world size, or 0 for the "
                     "ranks of this host"));
  }
  return spec;
}

}  // namespace

grpc::Status LocalSgdServiceImpl::CreatePostLocalSgd(
    grpc::ServerContext* context, const v1::CreatePostLocalSgdRequest* request,
    v1::PostLocalSgdInfo* response) {
  absl::StatusOr<LocalSgdSpec> spec = SpecFromProto(*request);
  if (!spec.ok()) return ToGrpcStatus(spec.status());
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "CreatePostLocalSgd");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  return Reply(runner_->Create(*std::move(spec)), response);
}

grpc::Status LocalSgdServiceImpl::Step(
    grpc::ServerContext* context, const v1::PostLocalSgdStepRequest* request,
    v1::PostLocalSgdStepResponse* response) {
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "Step");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  absl::StatusOr<int> averaged =
      runner_->Step(request->context_id(), CallerIdentity(*context));
  if (!averaged.ok()) return ToGrpcStatus(averaged.status());
  response->set_averaged_group_size(*averaged);
  return grpc::Status::OK;
}

grpc::Status LocalSgdServiceImpl::SetHyperparameters(
    grpc::ServerContext*, const v1::SetZeroHyperparametersRequest* request,
    v1::PostLocalSgdInfo* response) {
  absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> changes =
      HyperparametersFromProto(request->hyperparameters(), "hyperparameters");
  if (!changes.ok()) return ToGrpcStatus(changes.status());
  return Reply(runner_->SetHyperparameters(request->group(), *changes),
               response);
}

grpc::Status LocalSgdServiceImpl::GetPostLocalSgd(
    grpc::ServerContext*, const v1::GetPostLocalSgdRequest*,
    v1::PostLocalSgdInfo* response) {
  return Reply(runner_->Get(), response);
}

grpc::Status LocalSgdServiceImpl::GetStateDict(
    grpc::ServerContext* context, const v1::GetPostLocalSgdStateDictRequest*,
    grpc::ServerWriter<v1::MessageChunk>* writer) {
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "GetStateDict");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  auto dict = runner_->GetStateDict();
  if (!dict.ok()) return ToGrpcStatus(dict.status());
  v1::PostLocalSgdStateDict proto;
  StateDictToProto(dict->first, proto.mutable_state_dict());
  proto.set_step(dict->second);
  return WriteReplyChunked(proto, writer, "state_dict", slot->get());
}

grpc::Status LocalSgdServiceImpl::LoadStateDict(
    grpc::ServerContext* context, grpc::ServerReader<v1::MessageChunk>* reader,
    v1::LoadPostLocalSgdStateDictResponse* response) {
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "LoadStateDict");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  v1::PostLocalSgdStateDict request;
  absl::Status read =
      ReadRequestChunked(reader, slot->get(), budget_, "state_dict", &request);
  if (!read.ok()) return ToGrpcStatus(read);
  absl::StatusOr<OptimizerStateDict> dict =
      StateDictFromProto(request.state_dict());
  if (!dict.ok()) return ToGrpcStatus(dict.status());
  absl::StatusOr<std::vector<std::string>> warnings = runner_->LoadStateDict(
      *dict, request.has_step() ? std::optional<int64_t>(request.step())
                                : std::nullopt);
  if (!warnings.ok()) return ToGrpcStatus(warnings.status());
  for (const std::string& warning : *warnings) response->add_warnings(warning);
  return grpc::Status::OK;
}

}  // namespace distopt
