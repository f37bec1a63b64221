#include "common/collective_timeout.h"

#include "absl/strings/str_cat.h"

namespace distopt {

absl::StatusOr<absl::Duration> CollectiveTimeout(int64_t timeout_ms,
                                                 absl::string_view field) {
  if (timeout_ms == 0) {
    return absl::Milliseconds(kDefaultCollectiveTimeoutMilliseconds);
  }
  if (timeout_ms < 1 || timeout_ms > kMaxCollectiveTimeoutMilliseconds) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", timeout_ms, "; expected 1 to ",
                     kMaxCollectiveTimeoutMilliseconds, ", or 0 for ",
                     kDefaultCollectiveTimeoutMilliseconds));
  }
  return absl::Milliseconds(timeout_ms);
}

}  // namespace distopt
