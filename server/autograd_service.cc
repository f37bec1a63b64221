#include "server/autograd_service.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/chunked_message.h"
#include "common/cpu_backend.h"
#include "common/grpc_status.h"
#include "common/wire_limits.h"
#include "common/wire_tensor.h"
#include "server/autograd/parameter_locks.h"

namespace distopt {
namespace {

// The parameters a forward names: they exist and are distinct.
absl::StatusOr<std::vector<std::shared_ptr<Parameter>>> OpParameters(
    const ParameterStore& store,
    const google::protobuf::RepeatedField<uint64_t>& ids) {
  std::vector<std::shared_ptr<Parameter>> parameters;
  for (int i = 0; i < ids.size(); ++i) {
    for (int j = 0; j < i; ++j) {
      if (ids[j] == ids[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter_ids[", i, "]: parameter ", ids[i],
                         " is listed twice; expected each once"));
      }
    }
    absl::StatusOr<std::shared_ptr<Parameter>> parameter =
        store.Find(ParameterKey::ById(ids[i]));
    if (!parameter.ok()) {
      return absl::NotFoundError(absl::StrCat(
          "parameter_ids[", i, "]: no parameter with id ", ids[i]));
    }
    parameters.push_back(*std::move(parameter));
  }
  return parameters;
}

// A reply over `limit` tensor bytes, refused before anything changed.
absl::Status ReplyTooLarge(absl::string_view what, int64_t bytes,
                           int64_t limit) {
  absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
      what, " would take ", bytes, " bytes; expected at most ", limit,
      limit < kMaxChunkedPayloadBytes ? " in a unary call (send it chunked)"
                                      : " per call (split the batch)"));
  status.SetPayload(kReplyTooLargeMetadata, absl::Cord("1"));
  return status;
}

// A unary call's status; a reply too large for it says so in the trailing
// metadata, which the client reads to send the call again chunked.
grpc::Status UnaryStatus(grpc::ServerContext* context,
                         const absl::Status& status) {
  if (status.GetPayload(kReplyTooLargeMetadata).has_value()) {
    context->AddTrailingMetadata(kReplyTooLargeMetadata, "1");
  }
  return ToGrpcStatus(status);
}

// A chunked call: the whole request, `serve`, then the whole reply.
template <typename Request, typename Response, typename Serve>
grpc::Status ServeChunked(AutogradServiceImpl::ChunkStream* stream,
                          Serve serve) {
  Request request;
  // The tensors, plus room for the rest of the message.
  absl::Status status = ReadChunked(stream, "request", &request,
                                    kMaxChunkedPayloadBytes + (16 << 20));
  if (!status.ok()) return ToGrpcStatus(status);
  Response response;
  status = serve(request, &response);
  if (!status.ok()) return ToGrpcStatus(status);
  if (!WriteChunked(response, stream)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "reply: the stream to the caller broke");
  }
  return grpc::Status::OK;
}

}  // namespace

absl::Status AutogradServiceImpl::ServeForward(
    const v1::ForwardRequest& request, v1::ForwardResponse* response,
    int64_t reply_limit) {
  absl::Status status = ValidateContextId(request.context_id(), "context_id");
  if (!status.ok()) return status;
  absl::StatusOr<const AutogradOp*> op = ops_->Find(request.op());
  if (!op.ok()) return op.status();
  absl::StatusOr<std::vector<std::shared_ptr<Parameter>>> parameters =
      OpParameters(*parameters_, request.parameter_ids());
  if (!parameters.ok()) return parameters.status();
  std::vector<Tensor> inputs;
  for (int i = 0; i < request.inputs_size(); ++i) {
    absl::StatusOr<Tensor> input =
        TensorFromProto(request.inputs(i), absl::StrCat("inputs[", i, "]"));
    if (!input.ok()) return input.status();
    inputs.push_back(*std::move(input));
  }
  AutogradContext::ForwardRecord record;
  record.op = request.op();
  record.inputs = inputs.size();
  absl::StatusOr<std::vector<Tensor>> outputs;
  {
    // Shared locks: a concurrent step cannot change the values mid-forward.
    SharedParameterLocks locks(*parameters);
    std::vector<const Tensor*> values;
    for (const auto& parameter : *parameters) {
      parameter->mutex().AssertReaderHeld();
      values.push_back(&parameter->values_shared_locked());
      record.parameter_ids.push_back(parameter->id());
      record.parameter_versions.push_back(parameter->version_locked());
    }
    outputs = (*op)->Forward(inputs, values, &record.saved);
  }
  if (!outputs.ok()) return outputs.status();
  int64_t output_bytes = 0;
  for (const Tensor& output : *outputs) output_bytes += output.byte_size();
  if (output_bytes > reply_limit) {
    return ReplyTooLarge("inputs: the outputs", output_bytes, reply_limit);
  }
  for (const Tensor& output : *outputs) {
    record.outputs.emplace_back(output.dtype(), output.shape());
    TensorToProto(output, response->add_outputs());
  }
  response->set_forward_id(contexts_->GetOrCreate(request.context_id())
                               ->AddForward(std::move(record)));
  return absl::OkStatus();
}

absl::Status AutogradServiceImpl::ServeBackward(
    const v1::BackwardRequest& request, v1::BackwardResponse* response,
    int64_t reply_limit) {
  absl::StatusOr<std::shared_ptr<AutogradContext>> context =
      contexts_->Find(request.context_id());
  if (!context.ok()) return context.status();
  absl::StatusOr<std::shared_ptr<const AutogradContext::ForwardRecord>> record =
      (*context)->Forward(request.forward_id());
  if (!record.ok()) return record.status();
  const AutogradContext::ForwardRecord& forward = **record;
  if (request.output_gradients_size() !=
      static_cast<int>(forward.outputs.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output_gradients: ", request.output_gradients_size(),
        " tensors; expected ", forward.outputs.size(), " (one per output)"));
  }
  std::vector<Tensor> output_gradients;
  for (int i = 0; i < request.output_gradients_size(); ++i) {
    const std::string field = absl::StrCat("output_gradients[", i, "]");
    absl::StatusOr<Tensor> gradient =
        TensorFromProto(request.output_gradients(i), field);
    if (!gradient.ok()) return gradient.status();
    const auto& [dtype, shape] = forward.outputs[i];
    if (gradient->dtype() != dtype || gradient->shape() != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", DTypeName(gradient->dtype()),
          ShapeToString(gradient->shape()), "; expected ", DTypeName(dtype),
          ShapeToString(shape), " as the output"));
    }
    output_gradients.push_back(*std::move(gradient));
  }
  google::protobuf::RepeatedField<uint64_t> ids;
  ids.Add(forward.parameter_ids.begin(), forward.parameter_ids.end());
  absl::StatusOr<std::vector<std::shared_ptr<Parameter>>> parameters =
      OpParameters(*parameters_, ids);
  if (!parameters.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "forward ", request.forward_id(), ": ", parameters.status().message()));
  }
  absl::StatusOr<OpGradients> gradients;
  {
    SharedParameterLocks locks(*parameters);
    std::vector<const Tensor*> values;
    for (size_t i = 0; i < parameters->size(); ++i) {
      Parameter& parameter = *(*parameters)[i];
      parameter.mutex().AssertReaderHeld();
      if (parameter.version_locked() != forward.parameter_versions[i]) {
        return absl::FailedPreconditionError(absl::StrCat(
            "forward_id: parameter ", parameter.id(), " (\"", parameter.name(),
            "\") changed since forward ", request.forward_id(), " (version ",
            forward.parameter_versions[i], " -> ", parameter.version_locked(),
            "); expected backward before the step, as torch does"));
      }
      values.push_back(&parameter.values_shared_locked());
    }
    absl::StatusOr<const AutogradOp*> op = ops_->Find(forward.op);
    if (!op.ok()) return op.status();
    gradients = (*op)->Backward(forward.saved, values, output_gradients);
  }
  if (!gradients.ok()) return gradients.status();
  int64_t reply_bytes = 0;
  for (const std::optional<Tensor>& input : gradients->inputs) {
    if (input.has_value()) reply_bytes += input->byte_size();
  }
  // Before accumulating: a refused call changes nothing.
  if (reply_bytes > reply_limit) {
    return ReplyTooLarge("the inputs' gradients", reply_bytes, reply_limit);
  }
  for (size_t i = 0; i < parameters->size(); ++i) {
    const OpParameterGradient& gradient = gradients->parameters[i];
    const Parameter& parameter = *(*parameters)[i];
    absl::Status status =
        gradient.dense.has_value()
            ? (*context)->Accumulate(parameter, *gradient.dense,
                                     parameters_->backend(),
                                     parameters_->budget())
            : (*context)->AccumulateRows(
                  parameter, gradient.rows, gradient.row_values,
                  parameters_->backend(), parameters_->budget());
    if (!status.ok()) return status;
  }
  for (const std::optional<Tensor>& input : gradients->inputs) {
    v1::InputGradient* out = response->add_input_gradients();
    out->set_defined(input.has_value());
    if (input.has_value()) TensorToProto(*input, out->mutable_gradient());
  }
  return absl::OkStatus();
}

absl::Status AutogradServiceImpl::ServeAccumulateGradients(
    const v1::AccumulateGradientsRequest& request,
    v1::AccumulateGradientsResponse*, int64_t) {
  absl::Status status = ValidateContextId(request.context_id(), "context_id");
  if (!status.ok()) return status;
  // Check every gradient before adding any, so a bad one changes nothing.
  std::vector<std::shared_ptr<Parameter>> targets;
  std::vector<Tensor> gradients;
  for (int i = 0; i < request.gradients_size(); ++i) {
    const v1::ParameterGradient& entry = request.gradients(i);
    const std::string field = absl::StrCat("gradients[", i, "]");
    absl::StatusOr<std::shared_ptr<Parameter>> parameter =
        parameters_->Find(ParameterKey::ById(entry.parameter_id()));
    if (!parameter.ok()) {
      return absl::NotFoundError(absl::StrCat(
          field, ".parameter_id: no parameter with id ", entry.parameter_id()));
    }
    absl::StatusOr<Tensor> gradient =
        TensorFromProto(entry.gradient(), absl::StrCat(field, ".gradient"));
    if (!gradient.ok()) return gradient.status();
    if (gradient->dtype() != (*parameter)->dtype() ||
        gradient->shape() != (*parameter)->shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".gradient: ", DTypeName(gradient->dtype()),
                       ShapeToString(gradient->shape()), "; expected ",
                       DTypeName((*parameter)->dtype()),
                       ShapeToString((*parameter)->shape()), " as parameter \"",
                       (*parameter)->name(), "\""));
    }
    targets.push_back(*std::move(parameter));
    gradients.push_back(*std::move(gradient));
  }
  std::shared_ptr<AutogradContext> context =
      contexts_->GetOrCreate(request.context_id());
  for (size_t i = 0; i < targets.size(); ++i) {
    status = context->Accumulate(*targets[i], gradients[i],
                                 parameters_->backend(), parameters_->budget());
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status AutogradServiceImpl::ServeGetGradients(
    const v1::GetGradientsRequest& request, v1::GetGradientsResponse* response,
    int64_t reply_limit) {
  absl::StatusOr<std::shared_ptr<AutogradContext>> context =
      contexts_->Find(request.context_id());
  if (!context.ok()) return context.status();
  std::vector<uint64_t> ids(request.parameter_ids().begin(),
                            request.parameter_ids().end());
  if (ids.empty()) ids = (*context)->Info().parameter_ids;
  int64_t bytes = 0;
  for (uint64_t id : ids) {
    std::optional<Tensor> gradient = (*context)->Gradient(id);
    if (!gradient.has_value()) continue;
    bytes += gradient->byte_size();
    if (bytes > reply_limit) {
      return ReplyTooLarge("parameter_ids: the gradients asked for", bytes,
                           reply_limit);
    }
    absl::StatusOr<Tensor> host = gradient->CloneTo(CpuBackend());
    if (!host.ok()) return host.status();
    v1::ParameterGradient* entry = response->add_gradients();
    entry->set_parameter_id(id);
    TensorToProto(*host, entry->mutable_gradient());
  }
  return absl::OkStatus();
}

grpc::Status AutogradServiceImpl::Forward(grpc::ServerContext* context,
                                          const v1::ForwardRequest* request,
                                          v1::ForwardResponse* response) {
  return UnaryStatus(context,
                     ServeForward(*request, response, kMaxTensorPayloadBytes));
}

grpc::Status AutogradServiceImpl::Backward(grpc::ServerContext* context,
                                           const v1::BackwardRequest* request,
                                           v1::BackwardResponse* response) {
  return UnaryStatus(context,
                     ServeBackward(*request, response, kMaxTensorPayloadBytes));
}

grpc::Status AutogradServiceImpl::AccumulateGradients(
    grpc::ServerContext* context, const v1::AccumulateGradientsRequest* request,
    v1::AccumulateGradientsResponse* response) {
  return UnaryStatus(context, ServeAccumulateGradients(*request, response,
                                                       kMaxTensorPayloadBytes));
}

grpc::Status AutogradServiceImpl::GetGradients(
    grpc::ServerContext* context, const v1::GetGradientsRequest* request,
    v1::GetGradientsResponse* response) {
  return UnaryStatus(
      context, ServeGetGradients(*request, response, kMaxTensorPayloadBytes));
}

grpc::Status AutogradServiceImpl::ForwardChunked(grpc::ServerContext*,
                                                 ChunkStream* stream) {
  return ServeChunked<v1::ForwardRequest, v1::ForwardResponse>(
      stream, [this](const auto& request, auto* response) {
        return ServeForward(request, response, kMaxChunkedPayloadBytes);
      });
}

grpc::Status AutogradServiceImpl::BackwardChunked(grpc::ServerContext*,
                                                  ChunkStream* stream) {
  return ServeChunked<v1::BackwardRequest, v1::BackwardResponse>(
      stream, [this](const auto& request, auto* response) {
        return ServeBackward(request, response, kMaxChunkedPayloadBytes);
      });
}

grpc::Status AutogradServiceImpl::AccumulateGradientsChunked(
    grpc::ServerContext*, ChunkStream* stream) {
  return ServeChunked<v1::AccumulateGradientsRequest,
                      v1::AccumulateGradientsResponse>(
      stream, [this](const auto& request, auto* response) {
        return ServeAccumulateGradients(request, response,
                                        kMaxChunkedPayloadBytes);
      });
}

grpc::Status AutogradServiceImpl::GetGradientsChunked(grpc::ServerContext*,
                                                      ChunkStream* stream) {
  return ServeChunked<v1::GetGradientsRequest, v1::GetGradientsResponse>(
      stream, [this](const auto& request, auto* response) {
        return ServeGetGradients(request, response, kMaxChunkedPayloadBytes);
      });
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
