// A server-streaming reply of any size (a state dict, a chunked autograd
// call's reply) as chunks of its serialized message.
#ifndef DISTOPT_SERVER_SERVICES_CHUNKED_REPLY_H_
#define DISTOPT_SERVER_SERVICES_CHUNKED_REPLY_H_

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/chunked_message.h"
#include "grpcpp/support/status.h"
#include "server/services/stream_limits.h"

namespace distopt {

// Writes `reply` in chunks; UNAVAILABLE naming `field` when the stream to
// the caller broke (or its slot's stall timeout cancelled it).
template <typename Writer>
grpc::Status WriteReplyChunked(const google::protobuf::Message& reply,
                               Writer* writer, absl::string_view field,
                               StreamLimits::Slot* slot) {
  WatchedStream<Writer> watched(writer, slot);
  if (!WriteChunked(reply, &watched)) {
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat(field, ": the stream to the caller broke"));
  }
  return grpc::Status::OK;
}

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_CHUNKED_REPLY_H_
