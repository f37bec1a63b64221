#include "server/services/optimizer_service.h"

#include "common/grpc_status.h"
#include "server/optim/wire_optimizer.h"
#include "server/services/caller_identity.h"
#include "server/services/chunked_reply.h"

namespace distopt {

namespace {

void InfoToProto(const OptimizerInfo& info, v1::OptimizerInfo* proto) {
  proto->set_id(info.id);
  proto->set_kind(info.kind);
  for (const auto& [name, value] : info.hyperparameters) {
    (*proto->mutable_hyperparameters())[name] = HyperValueToProto(value);
  }
  proto->mutable_parameter_ids()->Assign(info.parameter_ids.begin(),
                                         info.parameter_ids.end());
  proto->set_steps(info.steps);
  proto->set_device(info.device.ToString());
}

grpc::Status Reply(const absl::StatusOr<OptimizerInfo>& info,
                   v1::OptimizerInfo* response) {
  if (!info.ok()) return ToGrpcStatus(info.status());
  InfoToProto(*info, response);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status OptimizerServiceImpl::ListOptimizerKinds(
    grpc::ServerContext*, const v1::ListOptimizerKindsRequest*,
    v1::ListOptimizerKindsResponse* response) {
  for (const std::string& name : registry_->Names()) {
    absl::StatusOr<const OptimizerKind*> kind = registry_->Find(name);
    if (kind.ok()) OptimizerKindToProto(name, **kind, response->add_kinds());
  }
  return grpc::Status::OK;
}

grpc::Status OptimizerServiceImpl::CreateOptimizer(
    grpc::ServerContext*, const v1::CreateOptimizerRequest* request,
    v1::OptimizerInfo* response) {
  absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> hyperparameters =
      HyperparametersFromProto(request->hyperparameters(), "hyperparameters");
  if (!hyperparameters.ok()) return ToGrpcStatus(hyperparameters.status());
  return Reply(optimizers_->Create(request->kind(), *hyperparameters,
                                   {request->parameter_ids().begin(),
                                    request->parameter_ids().end()}),
               response);
}

absl::Status OptimizerServiceImpl::StepInto(const v1::StepRequest& request,
                                            v1::StepResponse* response,
                                            absl::string_view caller) {
  absl::StatusOr<StepResult> result =
      optimizers_->Step(request.optimizer_id(), request.context_id(), caller);
  if (!result.ok()) return result.status();
  response->set_applied(result->applied);
  response->set_stepped_parameters(result->stepped_parameters);
  response->set_skipped_parameters(result->skipped_parameters);
  return absl::OkStatus();
}

grpc::Status OptimizerServiceImpl::Step(grpc::ServerContext* context,
                                        const v1::StepRequest* request,
                                        v1::StepResponse* response) {
  return ToGrpcStatus(StepInto(*request, response, CallerIdentity(*context)));
}

grpc::Status OptimizerServiceImpl::StepStream(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::StepOutcome, v1::StepRequest>* stream) {
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "StepStream");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  const std::string caller = CallerIdentity(*context);
  // Replies are watched; the wait for the next request is not (see
  // StreamLimits::Slot::AwaitRequest).
  WatchedStream<grpc::ServerReaderWriter<v1::StepOutcome, v1::StepRequest>>
      replies(stream, slot->get());
  v1::StepRequest request;
  while ((*slot)->AwaitRequest() && stream->Read(&request) &&
         (*slot)->BeginWork()) {
    v1::StepOutcome outcome;
    const absl::Status status =
        StepInto(request, outcome.mutable_response(), caller);
    if (!status.ok()) {
      outcome.clear_response();
      outcome.set_code(static_cast<int32_t>(status.code()));
      outcome.set_message(std::string(status.message()));
    }
    if (!replies.Write(outcome)) break;
  }
  // The client hung up or the daemon is closing: either way the stream
  // ends cleanly; a request that was not served got no outcome.
  return grpc::Status::OK;
}

grpc::Status OptimizerServiceImpl::GetOptimizer(
    grpc::ServerContext*, const v1::GetOptimizerRequest* request,
    v1::OptimizerInfo* response) {
  return Reply(optimizers_->Get(request->optimizer_id()), response);
}

grpc::Status OptimizerServiceImpl::ListOptimizers(
    grpc::ServerContext*, const v1::ListOptimizersRequest*,
    v1::ListOptimizersResponse* response) {
  for (const OptimizerInfo& info : optimizers_->List()) {
    InfoToProto(info, response->add_optimizers());
  }
  return grpc::Status::OK;
}

grpc::Status OptimizerServiceImpl::SetHyperparameters(
    grpc::ServerContext*, const v1::SetHyperparametersRequest* request,
    v1::OptimizerInfo* response) {
  absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> changes =
      HyperparametersFromProto(request->hyperparameters(), "hyperparameters");
  if (!changes.ok()) return ToGrpcStatus(changes.status());
  return Reply(
      optimizers_->SetHyperparameters(request->optimizer_id(), *changes),
      response);
}

grpc::Status OptimizerServiceImpl::GetStateDict(
    grpc::ServerContext* context, const v1::GetStateDictRequest* request,
    grpc::ServerWriter<v1::MessageChunk>* writer) {
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "GetStateDict");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  absl::StatusOr<OptimizerStateDict> dict =
      optimizers_->GetStateDict(request->optimizer_id());
  if (!dict.ok()) return ToGrpcStatus(dict.status());
  v1::OptimizerStateDict proto;
  StateDictToProto(*dict, &proto);
  return WriteReplyChunked(proto, writer, "state_dict", slot->get());
}

grpc::Status OptimizerServiceImpl::LoadStateDict(
    grpc::ServerContext* context, grpc::ServerReader<v1::MessageChunk>* reader,
    v1::LoadStateDictResponse*) {
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "LoadStateDict");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  v1::LoadStateDictRequest request;
  absl::Status read =
      ReadRequestChunked(reader, slot->get(), budget_, "request", &request);
  if (!read.ok()) return ToGrpcStatus(read);
  absl::StatusOr<OptimizerStateDict> dict =
      StateDictFromProto(request.state_dict());
  if (!dict.ok()) return ToGrpcStatus(dict.status());
  return ToGrpcStatus(
      optimizers_->LoadStateDict(request.optimizer_id(), *dict));
}

grpc::Status OptimizerServiceImpl::DeleteOptimizer(
    grpc::ServerContext*, const v1::DeleteOptimizerRequest* request,
    v1::OptimizerInfo* response) {
  return Reply(optimizers_->Delete(request->optimizer_id()), response);
}

}  // namespace distopt
