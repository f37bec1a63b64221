// The bucket_bytes field of the data-parallel create requests (ZeRO and
// post-local SGD): the bound of a step's scratch buffers.
#ifndef DISTOPT_SERVER_SERVICES_BUCKET_BYTES_H_
#define DISTOPT_SERVER_SERVICES_BUCKET_BYTES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "server/data_parallel/gradient_buckets.h"

namespace distopt {

inline constexpr int64_t kMinBucketBytes = 4096;
inline constexpr int64_t kMaxBucketBytes = int64_t{2} << 30;

// 0 means DDP's 25 MiB; otherwise INVALID_ARGUMENT outside the range.
inline absl::StatusOr<int64_t> BucketBytes(int64_t requested) {
  if (requested == 0) return kDefaultBucketBytes;
  if (requested < kMinBucketBytes || requested > kMaxBucketBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bucket_bytes: ", requested, "; expected ", kMinBucketBytes, " to ",
        kMaxBucketBytes, ", or 0 for ", kDefaultBucketBytes));
  }
  return requested;
}

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_BUCKET_BYTES_H_
