// How long a data-parallel call (ZeRO, post-local SGD) may wait for the
// other ranks: its requests carry `timeout_ms`, 0 meaning the default. The
// daemon bounds every collective of the call by it, and the client's
// deadline for the call allows it.
#ifndef DISTOPT_COMMON_COLLECTIVE_TIMEOUT_H_
#define DISTOPT_COMMON_COLLECTIVE_TIMEOUT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace distopt {

inline constexpr int64_t kDefaultCollectiveTimeoutMilliseconds = 60 * 1000;
inline constexpr int64_t kMaxCollectiveTimeoutMilliseconds = 3600 * 1000;

// `timeout_ms` as a duration (0: the default). INVALID_ARGUMENT naming
// `field` outside 0 to kMaxCollectiveTimeoutMilliseconds.
absl::StatusOr<absl::Duration> CollectiveTimeout(int64_t timeout_ms,
                                                 absl::string_view field);

}  // namespace distopt

#endif  // DISTOPT_COMMON_COLLECTIVE_TIMEOUT_H_
