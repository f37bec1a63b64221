// Large protobuf messages (state dicts of big models) over gRPC streams: the
// serialized bytes in chunks of at most kChunkBytes, so no single message
// comes near the message limit. Works with any reader or writer of
// v1::MessageChunk (server or client side).
#ifndef DISTOPT_COMMON_CHUNKED_MESSAGE_H_
#define DISTOPT_COMMON_CHUNKED_MESSAGE_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/memory_budget.h"
#include "google/protobuf/message.h"
#include "proto/distopt/v1/tensor.pb.h"

namespace distopt {

inline constexpr int64_t kChunkBytes = 1 << 20;

// Writes `message` as chunks; false when the stream broke (or the message
// does not serialize).
template <typename Writer>
bool WriteChunked(const google::protobuf::Message& message, Writer* writer) {
  std::string bytes;
  if (!message.SerializeToString(&bytes)) return false;
  int64_t offset = 0;
  do {
    v1::MessageChunk chunk;
    if (offset == 0) chunk.set_total_bytes(bytes.size());
    const int64_t size = std::min<int64_t>(kChunkBytes, bytes.size() - offset);
    chunk.set_data(bytes.data() + offset, size);
    if (!writer->Write(chunk)) return false;
    offset += size;
  } while (offset < static_cast<int64_t>(bytes.size()));
  return true;
}

// Reads chunks until the stream ends and parses them into `message`.
// INVALID_ARGUMENT naming `field` when the first chunk announces more than
// `max_total` bytes (before any is buffered), when the chunks do not add up
// to the total it announced, or when they do not parse. With a `budget`,
// the announced total is reserved from it before any byte is buffered, and
// held until the message is parsed: RESOURCE_EXHAUSTED naming `field` when
// it does not fit.
template <typename Reader>
absl::Status ReadChunked(
    Reader* reader, absl::string_view field, google::protobuf::Message* message,
    int64_t max_total = std::numeric_limits<int32_t>::max(),
    MemoryBudget* budget = nullptr) {
  Reservation buffered;  // Outlives `bytes`.
  std::string bytes;
  int64_t total = -1;
  v1::MessageChunk chunk;
  while (reader->Read(&chunk)) {
    if (total < 0) {
      total = chunk.total_bytes();
      if (total < 0 || total > max_total) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".total_bytes: ", total, "; expected 0 to ",
                         max_total, " bytes"));
      }
      if (budget != nullptr) {
        absl::StatusOr<Reservation> reserved =
            budget->ReserveTotal(static_cast<uint64_t>(total), field);
        if (!reserved.ok()) return reserved.status();
        buffered = *std::move(reserved);
      }
      bytes.reserve(total);
    }
    if (static_cast<int64_t>(bytes.size() + chunk.data().size()) > total) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": more than the ", total,
                       " bytes the first chunk announced"));
    }
    bytes += chunk.data();
  }
  if (total < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": no chunks; expected at least one"));
  }
  if (static_cast<int64_t>(bytes.size()) != total) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", bytes.size(),
                                                   " bytes; the first chunk "
                                                   "announced ",
                                                   total));
  }
  if (!message->ParseFromString(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": the bytes do not parse as ", message->GetTypeName()));
  }
  return absl::OkStatus();
}

}  // namespace distopt

#endif  // DISTOPT_COMMON_CHUNKED_MESSAGE_H_
