// Client-supplied text quoted in an error message. An error message travels
// back in gRPC's status metadata, which a client refuses beyond a few KiB:
// echoing a 100 KB name would turn a clear INVALID_ARGUMENT into a
// RESOURCE_EXHAUSTED about metadata. Text is escaped (no control bytes in
// logs) and cut after a bounded prefix, with its full length said.
#ifndef DISTOPT_COMMON_QUOTED_H_
#define DISTOPT_COMMON_QUOTED_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace distopt {

inline constexpr size_t kMaxQuotedBytes = 64;

// "\"text\"", or "\"first 64 bytes\"... (N bytes)".
std::string Quoted(absl::string_view text);

}  // namespace distopt

#endif  // DISTOPT_COMMON_QUOTED_H_
