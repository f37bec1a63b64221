// Calls that move one large message as a stream of chunks (state dicts,
// autograd calls with large tensors), for the client library's classes: the
// deadline allows for the transfer, and errors name the worker and the
// call.
#ifndef DISTOPT_CLIENT_STREAMED_CALLS_H_
#define DISTOPT_CLIENT_STREAMED_CALLS_H_

#include <limits>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "common/chunked_message.h"
#include "common/grpc_status.h"
#include "common/wire_limits.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/sync_stream.h"

namespace distopt {

// A server-streaming GetStateDict-like call into `out`.
template <typename Service, typename Request, typename Message>
absl::Status GetStreamed(Client& client, const std::string& worker,
                         std::unique_ptr<grpc::ClientReader<v1::MessageChunk>> (
                             Service::Stub::*method)(grpc::ClientContext*,
                                                     const Request&),
                         const Request& request, Message* out) {
  grpc::ClientContext context;
  // The size is not known beforehand: time for the largest message.
  client.SetDeadline(context, std::numeric_limits<int32_t>::max());
  typename Service::Stub stub(client.Channel(worker));
  auto reader = (stub.*method)(&context, request);
  absl::Status read = ReadChunked(reader.get(), "state_dict", out);
  absl::Status finished =
      FromGrpcCall(reader->Finish(), worker, "GetStateDict");
  if (!finished.ok()) return finished;
  if (!read.ok()) {
    return absl::DataLossError(
        absl::StrCat("worker ", worker, ": GetStateDict: ", read.message()));
  }
  return absl::OkStatus();
}

// A client-streaming LoadStateDict-like call of `message`.
template <typename Service, typename Response>
absl::Status PutStreamed(
    Client& client, const std::string& worker, absl::Duration wait,
    std::unique_ptr<grpc::ClientWriter<v1::MessageChunk>> (
        Service::Stub::*method)(grpc::ClientContext*, Response*),
    const google::protobuf::Message& message, Response* response) {
  grpc::ClientContext context;
  client.SetDeadline(context, message.ByteSizeLong(), wait);
  typename Service::Stub stub(client.Channel(worker));
  auto writer = (stub.*method)(&context, response);
  WriteChunked(message, writer.get());
  writer->WritesDone();
  return FromGrpcCall(writer->Finish(), worker, "LoadStateDict");
}

// An autograd call that carries tensors: unary when the request's
// `request_tensor_bytes` fit in one message and the daemon does not refuse
// the reply as too large for one (it says so in the trailing metadata,
// having changed nothing); otherwise the same request through the call's
// chunked variant. `reply_tensor_bytes` bounds the reply, for the deadline.
template <typename Request, typename Response>
absl::Status CallWithTensors(
    Client& client, const std::string& worker, absl::string_view name,
    grpc::Status (v1::AutogradService::Stub::*unary)(grpc::ClientContext*,
                                                     const Request&, Response*),
    std::unique_ptr<
        grpc::ClientReaderWriter<v1::MessageChunk, v1::MessageChunk>> (
        v1::AutogradService::Stub::*chunked)(grpc::ClientContext*),
    const Request& request, int64_t request_tensor_bytes,
    int64_t reply_tensor_bytes, Response* response) {
  v1::AutogradService::Stub stub(client.Channel(worker));
  if (request_tensor_bytes <= kMaxTensorPayloadBytes) {
    grpc::ClientContext context;
    client.SetDeadline(context, request_tensor_bytes);
    const grpc::Status status = (stub.*unary)(&context, request, response);
    if (status.ok()) return absl::OkStatus();
    if (context.GetServerTrailingMetadata().count(kReplyTooLargeMetadata) ==
        0) {
      return FromGrpcCall(status, worker, name);
    }
    response->Clear();
  }
  const std::string call = absl::StrCat(name, "Chunked");
  grpc::ClientContext context;
  client.SetDeadline(context, request_tensor_bytes + reply_tensor_bytes);
  auto stream = (stub.*chunked)(&context);
  const bool sent = WriteChunked(request, stream.get()) && stream->WritesDone();
  const absl::Status read =
      sent ? ReadChunked(stream.get(), "reply", response) : absl::OkStatus();
  const absl::Status finished = FromGrpcCall(stream->Finish(), worker, call);
  if (!finished.ok()) return finished;
  if (!sent || !read.ok()) {
    return absl::DataLossError(
        absl::StrCat("worker ", worker, ": ", call, ": ",
                     sent ? read.message() : "the request stream broke"));
  }
  return absl::OkStatus();
}

}  // namespace distopt

#endif  // DISTOPT_CLIENT_STREAMED_CALLS_H_
