#include "client/client.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/streamed_calls.h"
#include "common/grpc_status.h"
#include "common/wire_limits.h"
#include "common/wire_parameter.h"
#include "common/wire_tensor.h"
#include "grpc/grpc.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace distopt {
namespace {

// Values up to this size travel inside CreateParameter; the daemon returns
// up to the same size inline from GetParameter.
constexpr int64_t kInlineValueBytes = int64_t{3} << 20;
// The tensor bytes of an autograd call's request: refused beyond what even
// its chunked variant carries, with a clear error.
absl::StatusOr<int64_t> PayloadBytes(const std::vector<Tensor>& tensors,
                                     absl::string_view field) {
  int64_t bytes = 0;
  for (const Tensor& tensor : tensors) bytes += tensor.byte_size();
  if (bytes <= kMaxChunkedPayloadBytes) return bytes;
  return absl::ResourceExhaustedError(absl::StrCat(
      field, ": ", bytes, " bytes of tensors in one call; expected at most ",
      kMaxChunkedPayloadBytes, " (split the batch)"));
}

absl::Status RequireHost(const Tensor& values) {
  if (values.device().is_cpu()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "values: ", values.DebugString(), "; expected a host (cpu) tensor"));
}

void SetRef(const RemoteParameter& parameter, v1::ParameterRef* ref) {
  ref->set_id(parameter.id);
}

// Copies the streamed chunks into `values`, checking the layout named by the
// first chunk and that every byte arrives exactly once.
absl::Status ReceiveChunks(grpc::ClientReader<v1::ParameterChunk>& reader,
                           absl::string_view worker, Tensor& values) {
  v1::ParameterChunk chunk;
  const int64_t size = static_cast<int64_t>(values.byte_size());
  int64_t received = 0;
  bool first = true;
  while (reader.Read(&chunk)) {
    if (first) {
      first = false;
      absl::StatusOr<ParameterInfo> info = ParameterInfoFromProto(chunk.info());
      if (!info.ok()) return info.status();
      if (info->dtype != values.dtype() || info->shape != values.shape()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "values: ", values.DebugString(), "; parameter \"", info->name,
            "\" is ", DTypeName(info->dtype), ShapeToString(info->shape)));
      }
    }
    const int64_t length = static_cast<int64_t>(chunk.data().size());
    if (chunk.offset() < 0 || chunk.offset() > size - length) {
      return absl::InternalError(
          absl::StrCat("worker ", worker, ": ReadParameter: chunk [",
                       chunk.offset(), ", +", length, ") is out of range"));
    }
    std::memcpy(static_cast<char*>(values.data()) + chunk.offset(),
                chunk.data().data(), chunk.data().size());
    received += length;
  }
  if (!first && received != size) {
    return absl::InternalError(
        absl::StrCat("worker ", worker, ": ReadParameter: received ", received,
                     " bytes; expected ", size));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// Where a client's context counter starts: anywhere below 2^47. Two
// trainers that draw the same 16-bit client id (1 in 65536 a pair; with
// 100 trainers, 7 % for some pair) would otherwise number their contexts
// alike from 1, and without mutual TLS a daemon would add one's gradients
// into the other's context. Apart by a random start, their ids meet only
// if their ranges of contexts overlap as well.
uint64_t RandomCounterStart() {
  std::random_device random;
  const uint64_t bits = (uint64_t{random()} << 32) | random();
  return 1 + bits % ((uint64_t{1} << 47) - 1);
}

}  // namespace

Client::Client(ClientOptions options)
    : options_(std::move(options)),
      client_id_(std::random_device{}() & 0xffffu),
      next_context_(RandomCounterStart()),
      step_streams_(options_.rpc_timeout, [this](const std::string& worker) {
        return Channel(worker);
      }) {}

uint64_t Client::NewContextId() {
  const uint64_t counter =
      next_context_.fetch_add(1) & ((uint64_t{1} << 48) - 1);
  const uint64_t id = (client_id_ << 48) | counter;
  absl::MutexLock lock(&mutex_);
  live_contexts_.insert(id);
  return id;
}

bool Client::OwnsContext(uint64_t context_id) const {
  absl::MutexLock lock(&mutex_);
  return live_contexts_.contains(context_id);
}

void Client::ForgetContext(uint64_t context_id) {
  absl::MutexLock lock(&mutex_);
  live_contexts_.erase(context_id);
}

absl::Status Client::AccumulateGradients(
    const std::string& worker, uint64_t context_id,
    const std::vector<std::pair<uint64_t, Tensor>>& gradients) {
  std::vector<Tensor> tensors;
  for (const auto& entry : gradients) tensors.push_back(entry.second);
  absl::StatusOr<int64_t> bytes = PayloadBytes(tensors, "gradients");
  if (!bytes.ok()) return bytes.status();
  v1::AccumulateGradientsRequest request;
  request.set_context_id(context_id);
  for (const auto& [parameter_id, gradient] : gradients) {
    absl::Status host = RequireHost(gradient);
    if (!host.ok()) return host;
    v1::ParameterGradient* entry = request.add_gradients();
    entry->set_parameter_id(parameter_id);
    TensorToProto(gradient, entry->mutable_gradient());
  }
  v1::AccumulateGradientsResponse response;
  return CallWithTensors(*this, worker, "AccumulateGradients",
                         &v1::AutogradService::Stub::AccumulateGradients,
                         &v1::AutogradService::Stub::AccumulateGradientsChunked,
                         request, *bytes, 0, &response);
}

absl::StatusOr<std::map<uint64_t, Tensor>> Client::GetGradients(
    const std::string& worker, uint64_t context_id) {
  v1::GetGradientsRequest request;
  request.set_context_id(context_id);
  v1::GetGradientsResponse response;
  absl::Status status = CallWithTensors(
      *this, worker, "GetGradients", &v1::AutogradService::Stub::GetGradients,
      &v1::AutogradService::Stub::GetGradientsChunked, request, 0,
      kMaxChunkedPayloadBytes, &response);
  if (!status.ok()) return status;
  std::map<uint64_t, Tensor> gradients;
  for (const v1::ParameterGradient& entry : response.gradients()) {
    absl::StatusOr<Tensor> tensor =
        TensorFromProto(entry.gradient(), "gradient");
    if (!tensor.ok()) return tensor.status();
    gradients.emplace(entry.parameter_id(), *std::move(tensor));
  }
  return gradients;
}

absl::StatusOr<Client::ForwardResult> Client::Forward(
    const std::string& worker, uint64_t context_id, const std::string& op,
    const std::vector<uint64_t>& parameter_ids,
    const std::vector<Tensor>& inputs) {
  absl::StatusOr<int64_t> bytes = PayloadBytes(inputs, "inputs");
  if (!bytes.ok()) return bytes.status();
  v1::ForwardRequest request;
  request.set_context_id(context_id);
  request.set_op(op);
  request.mutable_parameter_ids()->Assign(parameter_ids.begin(),
                                          parameter_ids.end());
  for (const Tensor& input : inputs) {
    absl::Status host = RequireHost(input);
    if (!host.ok()) return host;
    TensorToProto(input, request.add_inputs());
  }
  v1::ForwardResponse response;
  absl::Status status = CallWithTensors(
      *this, worker, "Forward", &v1::AutogradService::Stub::Forward,
      &v1::AutogradService::Stub::ForwardChunked, request, *bytes,
      kMaxChunkedPayloadBytes, &response);
  if (!status.ok()) return status;
  ForwardResult result;
  result.forward_id = response.forward_id();
  for (const v1::TensorProto& output : response.outputs()) {
    absl::StatusOr<Tensor> tensor = TensorFromProto(output, "outputs");
    if (!tensor.ok()) return tensor.status();
    result.outputs.push_back(*std::move(tensor));
  }
  return result;
}

absl::StatusOr<std::vector<std::optional<Tensor>>> Client::Backward(
    const std::string& worker, uint64_t context_id, uint64_t forward_id,
    const std::vector<Tensor>& output_gradients) {
  absl::StatusOr<int64_t> bytes =
      PayloadBytes(output_gradients, "output_gradients");
  if (!bytes.ok()) return bytes.status();
  v1::BackwardRequest request;
  request.set_context_id(context_id);
  request.set_forward_id(forward_id);
  for (const Tensor& gradient : output_gradients) {
    absl::Status host = RequireHost(gradient);
    if (!host.ok()) return host;
    TensorToProto(gradient, request.add_output_gradients());
  }
  v1::BackwardResponse response;
  absl::Status status = CallWithTensors(
      *this, worker, "Backward", &v1::AutogradService::Stub::Backward,
      &v1::AutogradService::Stub::BackwardChunked, request, *bytes,
      kMaxChunkedPayloadBytes, &response);
  if (!status.ok()) return status;
  std::vector<std::optional<Tensor>> gradients;
  for (const v1::InputGradient& input : response.input_gradients()) {
    if (!input.defined()) {
      gradients.push_back(std::nullopt);
      continue;
    }
    absl::StatusOr<Tensor> tensor =
        TensorFromProto(input.gradient(), "input_gradients");
    if (!tensor.ok()) return tensor.status();
    gradients.push_back(*std::move(tensor));
  }
  return gradients;
}

absl::StatusOr<bool> Client::ReleaseContext(const std::string& worker,
                                            uint64_t context_id) {
  v1::ReleaseContextRequest request;
  request.set_context_id(context_id);
  v1::ReleaseContextResponse response;
  absl::Status status = CallUnary<v1::AutogradService>(
      worker, "ReleaseContext", &v1::AutogradService::Stub::ReleaseContext,
      request, &response);
  if (!status.ok()) return status;
  return response.released();
}

absl::StatusOr<v1::OptimizerInfo> Client::CreateOptimizer(
    const std::string& worker, const std::string& kind,
    const HyperparameterMap& hyperparameters,
    const std::vector<uint64_t>& parameter_ids) {
  v1::CreateOptimizerRequest request;
  request.set_kind(kind);
  for (const auto& [name, value] : hyperparameters) {
    (*request.mutable_hyperparameters())[name] = value;
  }
  request.mutable_parameter_ids()->Assign(parameter_ids.begin(),
                                          parameter_ids.end());
  v1::OptimizerInfo response;
  absl::Status status = CallUnary<v1::OptimizerService>(
      worker, "CreateOptimizer", &v1::OptimizerService::Stub::CreateOptimizer,
      request, &response);
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::StepResponse> Client::Step(const std::string& worker,
                                              uint64_t optimizer_id,
                                              uint64_t context_id) {
  return std::move(StepAll({{worker, optimizer_id}}, context_id).front());
}

std::vector<absl::StatusOr<v1::StepResponse>> Client::StepAll(
    const std::vector<StepTarget>& targets, uint64_t context_id) {
  return step_streams_.StepAll(targets, context_id);
}

absl::StatusOr<v1::OptimizerInfo> Client::SetHyperparameters(
    const std::string& worker, uint64_t optimizer_id,
    const HyperparameterMap& changes) {
  v1::SetHyperparametersRequest request;
  request.set_optimizer_id(optimizer_id);
  for (const auto& [name, value] : changes) {
    (*request.mutable_hyperparameters())[name] = value;
  }
  v1::OptimizerInfo response;
  absl::Status status = CallUnary<v1::OptimizerService>(
      worker, "SetHyperparameters",
      &v1::OptimizerService::Stub::SetHyperparameters, request, &response);
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::OptimizerStateDict> Client::GetStateDict(
    const std::string& worker, uint64_t optimizer_id) {
  v1::GetStateDictRequest request;
  request.set_optimizer_id(optimizer_id);
  v1::OptimizerStateDict dict;
  absl::Status status = GetStreamed<v1::OptimizerService>(
      *this, worker, &v1::OptimizerService::Stub::GetStateDict, request, &dict);
  if (!status.ok()) return status;
  return dict;
}

absl::Status Client::LoadStateDict(const std::string& worker,
                                   uint64_t optimizer_id,
                                   const v1::OptimizerStateDict& state_dict) {
  v1::LoadStateDictRequest request;
  request.set_optimizer_id(optimizer_id);
  *request.mutable_state_dict() = state_dict;
  v1::LoadStateDictResponse response;
  return PutStreamed<v1::OptimizerService>(
      *this, worker, absl::ZeroDuration(),
      &v1::OptimizerService::Stub::LoadStateDict, request, &response);
}

absl::StatusOr<v1::OptimizerInfo> Client::DeleteOptimizer(
    const std::string& worker, uint64_t optimizer_id) {
  v1::DeleteOptimizerRequest request;
  request.set_optimizer_id(optimizer_id);
  v1::OptimizerInfo response;
  absl::Status status = CallUnary<v1::OptimizerService>(
      worker, "DeleteOptimizer", &v1::OptimizerService::Stub::DeleteOptimizer,
      request, &response);
  if (!status.ok()) return status;
  return response;
}

std::shared_ptr<grpc::Channel> Client::Channel(const std::string& worker) {
  absl::MutexLock lock(&mutex_);
  auto it = channels_.find(worker);
  if (it != channels_.end()) return it->second;
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(kMaxMessageBytes);
  arguments.SetMaxSendMessageSize(kMaxMessageBytes);
  // Subchannels owned by this channel, not by gRPC's process-wide pool, so
  // that destroying the Client closes its connections at once: a worker
  // shutting down then does not wait for them to acknowledge its GOAWAY.
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A worker restarted from its checkpoint (after a crash, a preemption)
  // comes back within seconds on the same address: reconnect within a
  // second or two, not after gRPC's default backoff of up to two minutes,
  // which grows with every failed attempt while the worker is down.
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(worker, MakeChannelCredentials(), arguments);
  channels_.emplace(worker, channel);
  return channel;
}

std::shared_ptr<grpc::ChannelCredentials> Client::MakeChannelCredentials()
    const {
  if (options_.tls_root_certs.empty()) {
    // gRPC refuses to send the token over plaintext; calls then fail with
    // a message saying so.
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options_.tls_root_certs;
  ssl.pem_cert_chain = options_.tls_client_cert;
  ssl.pem_private_key = options_.tls_client_key;
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::SslCredentials(ssl);
  if (options_.auth_token.empty()) return credentials;
  return grpc::CompositeChannelCredentials(
      credentials, grpc::AccessTokenCredentials(options_.auth_token));
}

std::unique_ptr<v1::ParameterService::Stub> Client::ParameterStub(
    const std::string& worker) {
  return v1::ParameterService::NewStub(Channel(worker));
}

void Client::SetDeadline(grpc::ClientContext& context, int64_t payload_bytes,
                         absl::Duration wait) const {
  const absl::Duration transfer =
      absl::Seconds(static_cast<double>(payload_bytes) /
                    options_.min_stream_bytes_per_second);
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + options_.rpc_timeout + wait + transfer));
}

template <typename Service, typename Request, typename Response>
absl::Status Client::CallUnary(
    const std::string& worker, absl::string_view name,
    grpc::Status (Service::Stub::*method)(grpc::ClientContext*, const Request&,
                                          Response*),
    const Request& request, Response* response) {
  grpc::ClientContext context;
  SetDeadline(context, 0);
  typename Service::Stub stub(Channel(worker));
  return FromGrpcCall((stub.*method)(&context, request, response), worker,
                      name);
}

absl::StatusOr<std::vector<v1::OptimizerKindInfo>> Client::ListOptimizerKinds(
    const std::string& worker) {
  v1::ListOptimizerKindsRequest request;
  v1::ListOptimizerKindsResponse response;
  absl::Status status = CallUnary<v1::OptimizerService>(
      worker, "ListOptimizerKinds",
      &v1::OptimizerService::Stub::ListOptimizerKinds, request, &response);
  if (!status.ok()) return status;
  return std::vector<v1::OptimizerKindInfo>(response.kinds().begin(),
                                            response.kinds().end());
}

absl::StatusOr<std::vector<v1::OptimizerInfo>> Client::ListOptimizers(
    const std::string& worker) {
  v1::ListOptimizersResponse response;
  absl::Status status = CallUnary<v1::OptimizerService>(
      worker, "ListOptimizers", &v1::OptimizerService::Stub::ListOptimizers,
      v1::ListOptimizersRequest(), &response);
  if (!status.ok()) return status;
  return std::vector<v1::OptimizerInfo>(response.optimizers().begin(),
                                        response.optimizers().end());
}

absl::StatusOr<std::vector<v1::ContextInfo>> Client::ListContexts(
    const std::string& worker) {
  std::vector<v1::ContextInfo> all;
  v1::ListContextsRequest request;
  do {
    v1::ListContextsResponse response;
    absl::Status status = CallUnary<v1::AutogradService>(
        worker, "ListContexts", &v1::AutogradService::Stub::ListContexts,
        request, &response);
    if (!status.ok()) return status;
    all.insert(all.end(), response.contexts().begin(),
               response.contexts().end());
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return all;
}

absl::StatusOr<v1::GroupInfo> Client::GetGroup(const std::string& worker) {
  v1::GroupInfo response;
  absl::Status status = CallUnary<v1::GroupService>(
      worker, "GetGroup", &v1::GroupService::Stub::GetGroup,
      v1::GetGroupRequest(), &response);
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::WorkerStatus> Client::GetStatus(
    const std::string& worker, const v1::GetStatusRequest& request) {
  v1::WorkerStatus response;
  absl::Status status = CallUnary<v1::StatusService>(
      worker, "GetStatus", &v1::StatusService::Stub::GetStatus, request,
      &response);
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus>
Client::CheckHealth(const std::string& worker, const std::string& service) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  absl::Status status = CallUnary<grpc::health::v1::Health>(
      worker, "Health.Check", &grpc::health::v1::Health::Stub::Check, request,
      &response);
  if (!status.ok()) return status;
  return response.status();
}

absl::StatusOr<v1::CheckpointInfo> Client::SaveCheckpoint(
    const std::string& worker) {
  v1::CheckpointInfo response;
  absl::Status status = CallUnary<v1::CheckpointService>(
      worker, "Save", &v1::CheckpointService::Stub::Save,
      v1::SaveCheckpointRequest(), &response);
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::ListCheckpointsResponse> Client::ListCheckpoints(
    const std::string& worker) {
  v1::ListCheckpointsResponse response;
  absl::Status status = CallUnary<v1::CheckpointService>(
      worker, "ListCheckpoints", &v1::CheckpointService::Stub::ListCheckpoints,
      v1::ListCheckpointsRequest(), &response);
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<RemoteParameter> Client::CreateParameter(
    const std::string& worker, const std::string& name, DType dtype,
    const Shape& shape, const v1::Initializer& initializer) {
  v1::CreateParameterRequest request;
  request.set_name(name);
  request.set_dtype(DTypeToProto(dtype));
  request.mutable_shape()->Assign(shape.begin(), shape.end());
  *request.mutable_initializer() = initializer;
  v1::ParameterInfo response;
  absl::Status status = CallUnary<v1::ParameterService>(
      worker, "CreateParameter", &v1::ParameterService::Stub::CreateParameter,
      request, &response);
  if (!status.ok()) return status;
  return RemoteParameter{worker, response.id()};
}

absl::StatusOr<RemoteParameter> Client::CreateParameterFrom(
    const std::string& worker, const std::string& name, const Tensor& values) {
  absl::Status host = RequireHost(values);
  if (!host.ok()) return host;
  const int64_t bytes = static_cast<int64_t>(values.byte_size());
  if (bytes <= kInlineValueBytes) {
    v1::Initializer initializer;
    initializer.mutable_values()->set_data(
        static_cast<const char*>(values.data()), values.byte_size());
    return CreateParameter(worker, name, values.dtype(), values.shape(),
                           initializer);
  }
  absl::StatusOr<RemoteParameter> parameter =
      CreateParameter(worker, name, values.dtype(), values.shape());
  if (!parameter.ok()) return parameter;
  absl::StatusOr<ParameterInfo> written = WriteParameter(*parameter, values);
  if (!written.ok()) {
    // Leave nothing half made; the write's error is the one to report.
    DeleteParameter(*parameter).IgnoreError();
    return written.status();
  }
  return parameter;
}

absl::StatusOr<ParameterInfo> Client::GetParameter(
    const RemoteParameter& parameter) {
  v1::GetParameterRequest request;
  SetRef(parameter, request.mutable_parameter());
  v1::GetParameterResponse response;
  absl::Status status = CallUnary<v1::ParameterService>(
      parameter.worker, "GetParameter",
      &v1::ParameterService::Stub::GetParameter, request, &response);
  if (!status.ok()) return status;
  return ParameterInfoFromProto(response.info());
}

absl::StatusOr<RemoteParameter> Client::FindParameter(const std::string& worker,
                                                      const std::string& name) {
  v1::GetParameterRequest request;
  request.mutable_parameter()->set_name(name);
  v1::GetParameterResponse response;
  absl::Status status = CallUnary<v1::ParameterService>(
      worker, "GetParameter", &v1::ParameterService::Stub::GetParameter,
      request, &response);
  if (!status.ok()) return status;
  return RemoteParameter{worker, response.info().id()};
}

absl::StatusOr<Tensor> Client::ReadParameter(const RemoteParameter& parameter) {
  // A parameter's dtype and shape never change, so the buffer sized from
  // the metadata fits whatever the stream brings.
  absl::StatusOr<ParameterInfo> info = GetParameter(parameter);
  if (!info.ok()) return info.status();
  absl::StatusOr<Tensor> values =
      Tensor::AllocateHost(info->dtype, info->shape);
  if (!values.ok()) return values.status();
  absl::Status status = ReadParameterInto(parameter, *values);
  if (!status.ok()) return status;
  return values;
}

absl::Status Client::ReadParameterInto(const RemoteParameter& parameter,
                                       Tensor& values) {
  absl::Status host = RequireHost(values);
  if (!host.ok()) return host;
  absl::Status last_error;
  for (int attempt = 0; attempt < std::max(1, options_.read_attempts);
       ++attempt) {
    v1::ReadParameterRequest request;
    SetRef(parameter, request.mutable_parameter());
    request.set_chunk_bytes(std::min<int64_t>(options_.chunk_bytes, 1 << 20));
    grpc::ClientContext context;
    SetDeadline(context, static_cast<int64_t>(values.byte_size()));
    std::unique_ptr<grpc::ClientReader<v1::ParameterChunk>> reader =
        ParameterStub(parameter.worker)->ReadParameter(&context, request);
    absl::Status problem = ReceiveChunks(*reader, parameter.worker, values);
    if (!problem.ok()) {
      context.TryCancel();
      reader->Finish().IgnoreError();
      return problem;
    }
    grpc::Status status = reader->Finish();
    if (status.error_code() == grpc::StatusCode::ABORTED) {
      last_error = FromGrpcCall(status, parameter.worker, "ReadParameter");
      continue;  // Changed while being read: read the new values.
    }
    return FromGrpcCall(status, parameter.worker, "ReadParameter");
  }
  return last_error;
}

absl::StatusOr<ParameterInfo> Client::WriteParameter(
    const RemoteParameter& parameter, const Tensor& values) {
  absl::Status host = RequireHost(values);
  if (!host.ok()) return host;
  grpc::ClientContext context;
  const int64_t total = static_cast<int64_t>(values.byte_size());
  SetDeadline(context, total);
  v1::ParameterInfo response;
  std::unique_ptr<grpc::ClientWriter<v1::WriteParameterRequest>> writer =
      ParameterStub(parameter.worker)->WriteParameter(&context, &response);
  v1::WriteParameterRequest request;
  SetRef(parameter, request.mutable_parameter());
  request.set_dtype(DTypeToProto(values.dtype()));
  request.mutable_shape()->Assign(values.shape().begin(), values.shape().end());
  const char* data = static_cast<const char*>(values.data());
  const int64_t element = static_cast<int64_t>(ElementSize(values.dtype()));
  const int64_t chunk =
      std::max(element, options_.chunk_bytes / element * element);
  bool first = true;
  int64_t offset = 0;
  do {
    const int64_t length = std::min(chunk, total - offset);
    request.set_offset(offset);
    request.set_data(data + offset, static_cast<size_t>(length));
    // The daemon ends the stream early on a bad chunk: stop sending then, and
    // let Finish() report why.
    if (!writer->Write(request)) break;
    if (first) {
      request.clear_parameter();
      request.clear_dtype();
      request.clear_shape();
      first = false;
    }
    offset += length;
  } while (offset < total);
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok())
    return FromGrpcCall(status, parameter.worker, "WriteParameter");
  return ParameterInfoFromProto(response);
}

absl::StatusOr<std::vector<ParameterInfo>> Client::ListParameters(
    const std::string& worker, const std::string& name_prefix) {
  std::vector<ParameterInfo> all;
  v1::ListParametersRequest request;
  request.set_name_prefix(name_prefix);
  do {
    v1::ListParametersResponse response;
    absl::Status status = CallUnary<v1::ParameterService>(
        worker, "ListParameters", &v1::ParameterService::Stub::ListParameters,
        request, &response);
    if (!status.ok()) return status;
    for (const v1::ParameterInfo& proto : response.parameters()) {
      absl::StatusOr<ParameterInfo> info = ParameterInfoFromProto(proto);
      if (!info.ok()) return info.status();
      all.push_back(*std::move(info));
    }
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return all;
}

absl::StatusOr<ParameterInfo> Client::DeleteParameter(
    const RemoteParameter& parameter) {
  v1::DeleteParameterRequest request;
  SetRef(parameter, request.mutable_parameter());
  v1::DeleteParameterResponse response;
  absl::Status status = CallUnary<v1::ParameterService>(
      parameter.worker, "DeleteParameter",
      &v1::ParameterService::Stub::DeleteParameter, request, &response);
  if (!status.ok()) return status;
  return ParameterInfoFromProto(response.deleted());
}

}  // namespace distopt
