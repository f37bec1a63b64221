#include "server/services/parameter_service.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/shape.h"
#include "common/wire_parameter.h"
#include "common/wire_tensor.h"
#include "server/services/paging.h"

namespace distopt {
namespace {

absl::StatusOr<ParameterKey> KeyFromProto(const v1::ParameterRef& ref) {
  switch (ref.ref_case()) {
    case v1::ParameterRef::kId:
      return ParameterKey::ById(ref.id());
    case v1::ParameterRef::kName:
      return ParameterKey::ByName(ref.name());
    default:
      return absl::InvalidArgumentError(
          "parameter: neither id nor name is set; expected one of them");
  }
}

absl::StatusOr<std::shared_ptr<Parameter>> FindParameter(
    const ParameterStore& store, const v1::ParameterRef& ref) {
  absl::StatusOr<ParameterKey> key = KeyFromProto(ref);
  if (!key.ok()) return key.status();
  return store.Find(*key);
}

// Whether `ref` names `parameter`, by its id or by its name (an empty ref
// names none in particular).
bool Names(const v1::ParameterRef& ref, const Parameter& parameter) {
  switch (ref.ref_case()) {
    case v1::ParameterRef::kId:
      return ref.id() == parameter.id();
    case v1::ParameterRef::kName:
      return ref.name() == parameter.name();
    default:
      return true;
  }
}

absl::StatusOr<Initializer> InitializerFromProto(const v1::Initializer& proto) {
  switch (proto.kind_case()) {
    case v1::Initializer::KIND_NOT_SET:
    case v1::Initializer::kZeros:
      return ZerosInit{};
    case v1::Initializer::kConstant:
      return ConstantInit{proto.constant().value()};
    case v1::Initializer::kUniform:
      return UniformInit{proto.uniform().low(), proto.uniform().high(),
                         proto.uniform().seed()};
    case v1::Initializer::kNormal:
      return NormalInit{proto.normal().mean(), proto.normal().stddev(),
                        proto.normal().seed()};
    case v1::Initializer::kValues:
      return ValuesInit{proto.values().data()};
  }
  return absl::InvalidArgumentError("initializer: unknown kind");
}

// The dtype and shape the writer assumes, when it says, must be the
// parameter's: otherwise the bytes would be reinterpreted.
absl::Status CheckWriterLayout(const v1::WriteParameterRequest& first,
                               const Parameter& parameter) {
  if (first.dtype() != v1::DTYPE_UNSPECIFIED &&
      first.dtype() != DTypeToProto(parameter.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype: ",
        v1::DType_IsValid(first.dtype())
            ? v1::DType_Name(first.dtype())
            : absl::StrCat("unknown value ", static_cast<int>(first.dtype())),
        "; parameter \"", parameter.name(), "\" is ",
        DTypeName(parameter.dtype()), "; the parameter is unchanged"));
  }
  // A shape with no dtype is checked too; an empty one with no dtype means
  // the writer did not say.
  const bool says_shape =
      first.dtype() != v1::DTYPE_UNSPECIFIED || first.shape_size() > 0;
  if (!says_shape) return absl::OkStatus();
  auto mismatch = [&](absl::string_view given) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape: ", given, "; parameter \"", parameter.name(), "\" has shape ",
        ShapeToString(parameter.shape()), "; the parameter is unchanged"));
  };
  // No parameter has more than kMaxRank dimensions: a longer shape is not
  // echoed, only its rank is.
  if (first.shape_size() > static_cast<int>(kMaxRank)) {
    return mismatch(absl::StrCat(first.shape_size(), " dimensions"));
  }
  const Shape shape(first.shape().begin(), first.shape().end());
  if (shape != parameter.shape()) return mismatch(ShapeToString(shape));
  return absl::OkStatus();
}

// Reads `parameter` chunk by chunk into `send`, which returns false when the
// client has gone.
template <typename Send>
absl::Status StreamValues(const Parameter& parameter, int64_t chunk_bytes,
                          Send send) {
  const ParameterInfo info = parameter.Info();
  std::string buffer;
  int64_t offset = 0;
  do {
    const int64_t length = std::min(chunk_bytes, info.byte_size - offset);
    buffer.resize(static_cast<size_t>(length));
    absl::Status status =
        parameter.ReadBytes(info.version, offset, length, buffer.data());
    if (!status.ok()) return status;
    if (!send(offset == 0 ? &info : nullptr, offset, buffer)) {
      return absl::CancelledError("the client stopped reading");
    }
    offset += length;
  } while (offset < info.byte_size);
  return absl::OkStatus();
}

}  // namespace

grpc::Status ParameterServiceImpl::CreateParameter(
    grpc::ServerContext*, const v1::CreateParameterRequest* request,
    v1::ParameterInfo* response) {
  absl::StatusOr<DType> dtype = DTypeFromProto(request->dtype(), "dtype");
  if (!dtype.ok()) return ToGrpcStatus(dtype.status());
  absl::StatusOr<Initializer> initializer =
      InitializerFromProto(request->initializer());
  if (!initializer.ok()) return ToGrpcStatus(initializer.status());
  CreateParameterSpec spec;
  spec.name = request->name();
  spec.dtype = *dtype;
  spec.shape.assign(request->shape().begin(), request->shape().end());
  spec.initializer = *initializer;
  absl::StatusOr<ParameterInfo> info = store_->Create(spec);
  if (!info.ok()) return ToGrpcStatus(info.status());
  ParameterInfoToProto(*info, response);
  return grpc::Status::OK;
}

grpc::Status ParameterServiceImpl::GetParameter(
    grpc::ServerContext*, const v1::GetParameterRequest* request,
    v1::GetParameterResponse* response) {
  absl::StatusOr<std::shared_ptr<Parameter>> parameter =
      FindParameter(*store_, request->parameter());
  if (!parameter.ok()) return ToGrpcStatus(parameter.status());
  const ParameterInfo info = (*parameter)->Info();
  ParameterInfoToProto(info, response->mutable_info());
  if (!request->include_values()) return grpc::Status::OK;
  if (info.byte_size > kMaxInlineValueBytes) {
    return ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
        "include_values: parameter \"", info.name, "\" has ", info.byte_size,
        " bytes; GetParameter returns at most ", kMaxInlineValueBytes,
        ": use ReadParameter, which streams")));
  }
  v1::TensorProto* values = response->mutable_values();
  values->set_dtype(DTypeToProto(info.dtype));
  values->mutable_shape()->Assign(info.shape.begin(), info.shape.end());
  std::string* data = values->mutable_data();
  data->resize(static_cast<size_t>(info.byte_size));
  // One snapshot under the parameter's lock: a write in between cannot make
  // the read fail, and the version reported is the one read.
  absl::StatusOr<uint64_t> version = (*parameter)->ReadSnapshot(data->data());
  if (!version.ok()) return ToGrpcStatus(version.status());
  response->mutable_info()->set_version(*version);
  return grpc::Status::OK;
}

grpc::Status ParameterServiceImpl::ReadParameter(
    grpc::ServerContext* context, const v1::ReadParameterRequest* request,
    grpc::ServerWriter<v1::ParameterChunk>* writer) {
  int64_t chunk_bytes = request->chunk_bytes();
  if (chunk_bytes == 0) chunk_bytes = kMaxReadChunkBytes;
  if (chunk_bytes < 0 || chunk_bytes > kMaxReadChunkBytes) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes: ", chunk_bytes, "; expected 1 to ",
                     kMaxReadChunkBytes, ", or 0 for the default")));
  }
  absl::StatusOr<std::shared_ptr<Parameter>> parameter =
      FindParameter(*store_, request->parameter());
  if (!parameter.ok()) return ToGrpcStatus(parameter.status());
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "ReadParameter");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  // A reader that stalls is cut off.
  WatchedStream<grpc::ServerWriter<v1::ParameterChunk>> watched(writer,
                                                                slot->get());
  v1::ParameterChunk chunk;
  return ToGrpcStatus(StreamValues(
      **parameter, chunk_bytes,
      [&](const ParameterInfo* info, int64_t offset, std::string& data) {
        if (context->IsCancelled()) return false;
        chunk.Clear();
        if (info != nullptr) ParameterInfoToProto(*info, chunk.mutable_info());
        chunk.set_offset(offset);
        chunk.mutable_data()->swap(data);
        const bool sent = watched.Write(chunk);
        chunk.mutable_data()->swap(data);  // Reuse the buffer.
        return sent;
      }));
}

grpc::Status ParameterServiceImpl::WriteParameter(
    grpc::ServerContext* context,
    grpc::ServerReader<v1::WriteParameterRequest>* reader,
    v1::ParameterInfo* response) {
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      streams_->Acquire(context, "WriteParameter");
  if (!slot.ok()) return ToGrpcStatus(slot.status());
  v1::WriteParameterRequest request;
  WatchedStream<grpc::ServerReader<v1::WriteParameterRequest>> watched(
      reader, slot->get());
  if (!watched.Read(&request)) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "parameter: the stream was empty; expected a first message naming "
        "the parameter"));
  }
  absl::StatusOr<std::shared_ptr<Parameter>> parameter =
      FindParameter(*store_, request.parameter());
  if (!parameter.ok()) return ToGrpcStatus(parameter.status());
  absl::Status layout = CheckWriterLayout(request, **parameter);
  if (!layout.ok()) return ToGrpcStatus(layout);
  absl::StatusOr<std::unique_ptr<ParameterWrite>> write =
      ParameterWrite::Begin(*parameter, *store_);
  if (!write.ok()) return ToGrpcStatus(write.status());
  int64_t message = 0;
  do {
    // Later messages may name it too, by id or by name.
    if (message > 0 && request.has_parameter() &&
        !Names(request.parameter(), **parameter)) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "parameter: message ", message,
          " names another parameter; expected the one of the first message "
          "or none; the parameter is unchanged")));
    }
    // An empty first message only names the parameter.
    if (message > 0 || !request.data().empty()) {
      absl::Status status =
          (*write)->AddChunk(request.offset(), request.data());
      if (!status.ok()) {
        return ToGrpcStatus(absl::Status(
            status.code(), absl::StrCat(status.message(), " (message ", message,
                                        "); the parameter is unchanged")));
      }
    }
    ++message;
  } while (watched.Read(&request));
  absl::StatusOr<ParameterInfo> info = (*write)->Commit();
  if (!info.ok()) return ToGrpcStatus(info.status());
  ParameterInfoToProto(*info, response);
  return grpc::Status::OK;
}

grpc::Status ParameterServiceImpl::ListParameters(
    grpc::ServerContext*, const v1::ListParametersRequest* request,
    v1::ListParametersResponse* response) {
  absl::StatusOr<PageRequest> asked =
      ParsePageRequest(request->page_size(), request->page_token());
  if (!asked.ok()) return ToGrpcStatus(asked.status());
  ParameterPage page =
      store_->List(request->name_prefix(), asked->after_id, asked->limit);
  for (const ParameterInfo& info : page.parameters) {
    ParameterInfoToProto(info, response->add_parameters());
  }
  response->set_next_page_token(NextPageToken(page.next_after_id));
  return grpc::Status::OK;
}

grpc::Status ParameterServiceImpl::DeleteParameter(
    grpc::ServerContext*, const v1::DeleteParameterRequest* request,
    v1::DeleteParameterResponse* response) {
  absl::StatusOr<ParameterKey> key = KeyFromProto(request->parameter());
  if (!key.ok()) return ToGrpcStatus(key.status());
  absl::StatusOr<ParameterInfo> info = store_->Delete(*key);
  if (!info.ok()) return ToGrpcStatus(info.status());
  ParameterInfoToProto(*info, response->mutable_deleted());
  return grpc::Status::OK;
}

}  // namespace distopt
