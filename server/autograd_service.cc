#include "server/autograd_service.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cpu_backend.h"
#include "common/grpc_status.h"
#include "common/wire_tensor.h"

namespace distopt {

grpc::Status AutogradServiceImpl::AccumulateGradients(
    grpc::ServerContext*, const v1::AccumulateGradientsRequest* request,
    v1::AccumulateGradientsResponse*) {
  absl::Status status = ValidateContextId(request->context_id(), "context_id");
  if (!status.ok()) return ToGrpcStatus(status);
  // Check every gradient before adding any, so a bad one changes nothing.
  std::vector<std::shared_ptr<Parameter>> targets;
  std::vector<Tensor> gradients;
  for (int i = 0; i < request->gradients_size(); ++i) {
    const v1::ParameterGradient& entry = request->gradients(i);
    const std::string field = absl::StrCat("gradients[", i, "]");
    absl::StatusOr<std::shared_ptr<Parameter>> parameter =
        parameters_->Find(ParameterKey::ById(entry.parameter_id()));
    if (!parameter.ok()) {
      return ToGrpcStatus(absl::NotFoundError(
          absl::StrCat(field, ".parameter_id: no parameter with id ",
                       entry.parameter_id())));
    }
    absl::StatusOr<Tensor> gradient =
        TensorFromProto(entry.gradient(), absl::StrCat(field, ".gradient"));
    if (!gradient.ok()) return ToGrpcStatus(gradient.status());
    if (gradient->dtype() != (*parameter)->dtype() ||
        gradient->shape() != (*parameter)->shape()) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat(field, ".gradient: ", DTypeName(gradient->dtype()),
                       ShapeToString(gradient->shape()), "; expected ",
                       DTypeName((*parameter)->dtype()),
                       ShapeToString((*parameter)->shape()), " as parameter \"",
                       (*parameter)->name(), "\"")));
    }
    targets.push_back(*std::move(parameter));
    gradients.push_back(*std::move(gradient));
  }
  std::shared_ptr<AutogradContext> context =
      contexts_->GetOrCreate(request->context_id());
  for (size_t i = 0; i < targets.size(); ++i) {
    status = context->Accumulate(*targets[i], gradients[i],
                                 parameters_->backend(), parameters_->budget());
    if (!status.ok()) return ToGrpcStatus(status);
  }
  return grpc::Status::OK;
}

grpc::Status AutogradServiceImpl::GetGradients(
    grpc::ServerContext*, const v1::GetGradientsRequest* request,
    v1::GetGradientsResponse* response) {
  absl::StatusOr<std::shared_ptr<AutogradContext>> context =
      contexts_->Find(request->context_id());
  if (!context.ok()) return ToGrpcStatus(context.status());
  std::vector<uint64_t> ids(request->parameter_ids().begin(),
                            request->parameter_ids().end());
  if (ids.empty()) ids = (*context)->Info().parameter_ids;
  for (uint64_t id : ids) {
    std::optional<Tensor> gradient = (*context)->Gradient(id);
    if (!gradient.has_value()) continue;
    absl::StatusOr<Tensor> host = gradient->CloneTo(CpuBackend());
    if (!host.ok()) return ToGrpcStatus(host.status());
    v1::ParameterGradient* entry = response->add_gradients();
    entry->set_parameter_id(id);
    TensorToProto(*host, entry->mutable_gradient());
  }
  return grpc::Status::OK;
}

grpc::Status AutogradServiceImpl::ReleaseContext(
    grpc::ServerContext*, const v1::ReleaseContextRequest* request,
    v1::ReleaseContextResponse* response) {
  response->set_released(contexts_->Release(request->context_id()));
  return grpc::Status::OK;
}

grpc::Status AutogradServiceImpl::ListContexts(
    grpc::ServerContext*, const v1::ListContextsRequest*,
    v1::ListContextsResponse* response) {
  const absl::Time now = absl::Now();
  for (const ContextInfo& info : contexts_->List()) {
    v1::ContextInfo* out = response->add_contexts();
    out->set_context_id(info.id);
    out->set_age_ms(absl::ToInt64Milliseconds(now - info.created));
    out->set_idle_ms(absl::ToInt64Milliseconds(now - info.last_used));
    out->mutable_parameter_ids()->Assign(info.parameter_ids.begin(),
                                         info.parameter_ids.end());
    out->set_bytes(static_cast<int64_t>(info.bytes));
  }
  return grpc::Status::OK;
}

}  // namespace distopt
