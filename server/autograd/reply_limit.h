// The limit on what one autograd call may send back, checked before the
// reply is made: a small request must not make the daemon allocate a huge
// reply (a linear op over a weight with no input features, an embedding of
// a wide table, turn a few bytes of input into gigabytes of output).
#ifndef DISTOPT_SERVER_AUTOGRAD_REPLY_LIMIT_H_
#define DISTOPT_SERVER_AUTOGRAD_REPLY_LIMIT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace distopt {

// RESOURCE_EXHAUSTED naming `what`, with the payload that tells the client
// to send the call chunked (or split it) when the limit is the unary one.
absl::Status ReplyTooLarge(absl::string_view what, int64_t bytes,
                           int64_t limit);

// OK when `rows` x `columns` float32 values fit `limit` bytes; else
// ReplyTooLarge naming `what` (also when the product overflows).
absl::Status CheckFloatReplyFits(absl::string_view what, int64_t rows,
                                 int64_t columns, int64_t limit);

}  // namespace distopt

#endif  // DISTOPT_SERVER_AUTOGRAD_REPLY_LIMIT_H_
