#include "server/services/autograd_service.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/wire_limits.h"
#include "common/wire_tensor.h"
#include "server/services/caller_identity.h"
#include "server/services/chunked_reply.h"
#include "server/services/paging.h"

namespace distopt {
namespace {

// A unary call's status; a reply too large for it says so in the trailing
// metadata, which the client reads to send the call again chunked.
grpc::Status UnaryStatus(grpc::ServerContext* context,
                         const absl::Status& status) {
  if (status.GetPayload(kReplyTooLargeMetadata).has_value()) {
    context->AddTrailingMetadata(kReplyTooLargeMetadata, "1");
  }
  return ToGrpcStatus(status);
}

// The request's tensors, named `field`[i] in errors.
absl::StatusOr<std::vector<Tensor>> TensorsFromProto(
    const google::protobuf::RepeatedPtrField<v1::TensorProto>& protos,
    absl::string_view field) {
  std::vector<Tensor> tensors;
  tensors.reserve(protos.size());
  for (int i = 0; i < protos.size(); ++i) {
    absl::StatusOr<Tensor> tensor =
        TensorFromProto(protos[i], absl::StrCat(field, "[", i, "]"));
    if (!tensor.ok()) return tensor.status();
    tensors.push_back(*std::move(tensor));
  }
  return tensors;
}

}  // namespace

absl::Status AutogradServiceImpl::ServeForward(
    const v1::ForwardRequest& request, v1::ForwardResponse* response,
    int64_t reply_limit, absl::string_view caller) {
  ForwardCall call;
  call.context_id = request.context_id();
  call.caller = std::string(caller);
  call.op = request.op();
  call.parameter_ids.assign(request.parameter_ids().begin(),
                            request.parameter_ids().end());
  absl::StatusOr<std::vector<Tensor>> inputs =
      TensorsFromProto(request.inputs(), "inputs");
  if (!inputs.ok()) return inputs.status();
  call.inputs = *std::move(inputs);
  absl::StatusOr<ForwardResult> result = engine_->Forward(call, reply_limit);
  if (!result.ok()) return result.status();
  for (const Tensor& output : result->outputs) {
    TensorToProto(output, response->add_outputs());
  }
  response->set_forward_id(result->forward_id);
  return absl::OkStatus();
}

absl::Status AutogradServiceImpl::ServeBackward(
    const v1::BackwardRequest& request, v1::BackwardResponse* response,
    int64_t reply_limit, absl::string_view caller) {
  absl::StatusOr<std::vector<Tensor>> output_gradients =
      TensorsFromProto(request.output_gradients(), "output_gradients");
  if (!output_gradients.ok()) return output_gradients.status();
  absl::StatusOr<std::vector<std::optional<Tensor>>> input_gradients =
      engine_->Backward(request.context_id(), request.forward_id(),
                        *output_gradients, reply_limit, caller);
  if (!input_gradients.ok()) return input_gradients.status();
  for (const std::optional<Tensor>& input : *input_gradients) {
    v1::InputGradient* out = response->add_input_gradients();
    out->set_defined(input.has_value());
    if (input.has_value()) TensorToProto(*input, out->mutable_gradient());
  }
  return absl::OkStatus();
}

absl::Status AutogradServiceImpl::ServeAccumulateGradients(
    const v1::AccumulateGradientsRequest& request,
    v1::AccumulateGradientsResponse*, int64_t, absl::string_view caller) {
  std::vector<ParameterGradient> gradients;
  gradients.reserve(request.gradients_size());
  for (int i = 0; i < request.gradients_size(); ++i) {
    const v1::ParameterGradient& entry = request.gradients(i);
    absl::StatusOr<Tensor> gradient = TensorFromProto(
        entry.gradient(), absl::StrCat("gradients[", i, "].gradient"));
    if (!gradient.ok()) return gradient.status();
    gradients.push_back({entry.parameter_id(), *std::move(gradient)});
  }
  return engine_->AccumulateGradients(request.context_id(), gradients, caller);
}

absl::Status AutogradServiceImpl::ServeGetGradients(
    const v1::GetGradientsRequest& request, v1::GetGradientsResponse* response,
    int64_t reply_limit, absl::string_view caller) {
  absl::StatusOr<std::vector<ParameterGradient>> gradients =
      engine_->GetGradients(
          request.context_id(),
          {request.parameter_ids().begin(), request.parameter_ids().end()},
          reply_limit, caller);
  if (!gradients.ok()) return gradients.status();
  for (const ParameterGradient& gradient : *gradients) {
    v1::ParameterGradient* entry = response->add_gradients();
    entry->set_parameter_id(gradient.parameter_id);
    TensorToProto(gradient.gradient, entry->mutable_gradient());
  }
  return absl::OkStatus();
}

grpc::Status AutogradServiceImpl::Forward(grpc::ServerContext* context,
                                          const v1::ForwardRequest* request,
                                          v1::ForwardResponse* response) {
  return UnaryStatus(context,
                     ServeForward(*request, response, kMaxTensorPayloadBytes,
                                  CallerIdentity(*context)));
}

grpc::Status AutogradServiceImpl::Backward(grpc::ServerContext* context,
                                           const v1::BackwardRequest* request,
                                           v1::BackwardResponse* response) {
  return UnaryStatus(context,
                     ServeBackward(*request, response, kMaxTensorPayloadBytes,
                                   CallerIdentity(*context)));
}

grpc::Status AutogradServiceImpl::AccumulateGradients(
    grpc::ServerContext* context, const v1::AccumulateGradientsRequest* request,
    v1::AccumulateGradientsResponse* response) {
  return UnaryStatus(context, ServeAccumulateGradients(
                                  *request, response, kMaxTensorPayloadBytes,
                                  CallerIdentity(*context)));
}

grpc::Status AutogradServiceImpl::GetGradients(
    grpc::ServerContext* context, const v1::GetGradientsRequest* request,
    v1::GetGradientsResponse* response) {
  return UnaryStatus(
      context, ServeGetGradients(*request, response, kMaxTensorPayloadBytes,
                                 CallerIdentity(*context)));
}

template <typename Request, typename Response>
grpc::Status AutogradServiceImpl::ServeChunked(
    grpc::ServerContext* context, ChunkStream* stream, absl::string_view call,
    absl::Status (AutogradServiceImpl::*serve)(const Request&, Response*,
                                               int64_t, absl::string_view)) {
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, call);
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  Request request;
  absl::Status status =
      ReadRequestChunked(stream, slot->get(), budget_, "request", &request,
                         kMaxChunkedMessageBytes);
  if (!status.ok()) return ToGrpcStatus(status);
  Response response;
  status = (this->*serve)(request, &response, kMaxChunkedPayloadBytes,
                          CallerIdentity(*context));
  if (!status.ok()) return ToGrpcStatus(status);
  return WriteReplyChunked(response, stream, "reply", slot->get());
}

grpc::Status AutogradServiceImpl::ForwardChunked(grpc::ServerContext* context,
                                                 ChunkStream* stream) {
  return ServeChunked(context, stream, "ForwardChunked",
                      &AutogradServiceImpl::ServeForward);
}

grpc::Status AutogradServiceImpl::BackwardChunked(grpc::ServerContext* context,
                                                  ChunkStream* stream) {
  return ServeChunked(context, stream, "BackwardChunked",
                      &AutogradServiceImpl::ServeBackward);
}

grpc::Status AutogradServiceImpl::AccumulateGradientsChunked(
    grpc::ServerContext* context, ChunkStream* stream) {
  return ServeChunked(context, stream, "AccumulateGradientsChunked",
                      &AutogradServiceImpl::ServeAccumulateGradients);
}

grpc::Status AutogradServiceImpl::GetGradientsChunked(
    grpc::ServerContext* context, ChunkStream* stream) {
  return ServeChunked(context, stream, "GetGradientsChunked",
                      &AutogradServiceImpl::ServeGetGradients);
}

grpc::Status AutogradServiceImpl::ReleaseContext(
    grpc::ServerContext* context, const v1::ReleaseContextRequest* request,
    v1::ReleaseContextResponse* response) {
  absl::StatusOr<bool> released =
      contexts_->Release(request->context_id(), CallerIdentity(*context));
  if (!released.ok()) return ToGrpcStatus(released.status());
  response->set_released(*released);
  return grpc::Status::OK;
}

grpc::Status AutogradServiceImpl::ListContexts(
    grpc::ServerContext* context, const v1::ListContextsRequest* request,
    v1::ListContextsResponse* response) {
  absl::StatusOr<PageRequest> asked =
      ParsePageRequest(request->page_size(), request->page_token());
  if (!asked.ok()) return ToGrpcStatus(asked.status());
  const absl::Time now = absl::Now();
  const ContextPage page =
      contexts_->List(asked->after_id, asked->limit, CallerIdentity(*context));
  for (const ContextInfo& info : page.contexts) {
    v1::ContextInfo* out = response->add_contexts();
    out->set_context_id(info.id);
    out->set_age_ms(absl::ToInt64Milliseconds(now - info.created));
    out->set_idle_ms(absl::ToInt64Milliseconds(now - info.last_used));
    out->mutable_parameter_ids()->Assign(info.parameter_ids.begin(),
                                         info.parameter_ids.end());
    out->set_bytes(static_cast<int64_t>(info.bytes));
    out->set_saved_bytes(static_cast<int64_t>(info.saved_bytes));
  }
  response->set_next_page_token(NextPageToken(page.next_after_id));
  return grpc::Status::OK;
}

}  // namespace distopt
