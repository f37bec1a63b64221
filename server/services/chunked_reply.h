// Messages of any size as chunks of their serialized bytes, on the server
// side: a server-streaming reply (a state dict, a chunked autograd call's
// reply) and a client-streaming request (a state dict to load, a chunked
// autograd call's request). Each read and write is watched by the call's
// slot (see StreamLimits).
#ifndef DISTOPT_SERVER_SERVICES_CHUNKED_REPLY_H_
#define DISTOPT_SERVER_SERVICES_CHUNKED_REPLY_H_

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/chunked_message.h"
#include "common/memory_budget.h"
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

// Reads a request sent in chunks into `request` (see ReadChunked), its
// buffer charged to `budget` while it arrives: INVALID_ARGUMENT naming
// `field` for chunks that do not make up a message of at most `max_total`
// bytes, RESOURCE_EXHAUSTED when the budget has no room for it.
template <typename Reader>
absl::Status ReadRequestChunked(
    Reader* reader, StreamLimits::Slot* slot, MemoryBudget* budget,
    absl::string_view field, google::protobuf::Message* request,
    int64_t max_total = std::numeric_limits<int32_t>::max()) {
  WatchedStream<Reader> watched(reader, slot);
  return ReadChunked(&watched, field, request, max_total, budget);
}

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_CHUNKED_REPLY_H_
