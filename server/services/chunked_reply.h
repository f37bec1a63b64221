// A server-streaming reply of any size (a state dict, a chunked autograd
// call's reply) as chunks of its serialized message.
#ifndef DISTOPT_SERVER_SERVICES_CHUNKED_REPLY_H_
#define DISTOPT_SERVER_SERVICES_CHUNKED_REPLY_H_

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/chunked_message.h"
#include "grpcpp/support/status.h"

namespace distopt {

// Writes `reply` in chunks; UNAVAILABLE naming `field` when the stream to
// the caller broke.
template <typename Writer>
grpc::Status WriteReplyChunked(const google::protobuf::Message& reply,
                               Writer* writer, absl::string_view field) {
  if (!WriteChunked(reply, writer)) {
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat(field, ": the stream to the caller broke"));
  }
  return grpc::Status::OK;
}

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_CHUNKED_REPLY_H_
