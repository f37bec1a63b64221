// Calls that move one large message as a stream of chunks (state dicts),
// for the client library's classes: the deadline allows for the transfer,
// and errors name the worker and the call.
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

}  // namespace distopt

#endif  // DISTOPT_CLIENT_STREAMED_CALLS_H_
