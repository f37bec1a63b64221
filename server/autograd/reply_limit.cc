#include "server/autograd/reply_limit.h"

#include <limits>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/wire_limits.h"

namespace distopt {

absl::Status ReplyTooLarge(absl::string_view what, int64_t bytes,
                           int64_t limit) {
  absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
      what, " would take ", bytes, " bytes; expected at most ", limit,
      limit < kMaxChunkedPayloadBytes ? " in a unary call (send it chunked)"
                                      : " per call (split the batch)"));
  status.SetPayload(kReplyTooLargeMetadata, absl::Cord("1"));
  return status;
}

absl::Status CheckFloatReplyFits(absl::string_view what, int64_t rows,
                                 int64_t columns, int64_t limit) {
  int64_t elements = 0;
  int64_t bytes = 0;
  if (__builtin_mul_overflow(rows, columns, &elements) ||
      __builtin_mul_overflow(elements, int64_t{sizeof(float)}, &bytes)) {
    bytes = std::numeric_limits<int64_t>::max();
  }
  if (bytes <= limit) return absl::OkStatus();
  return ReplyTooLarge(what, bytes, limit);
}

}  // namespace distopt
