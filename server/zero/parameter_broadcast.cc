#include "server/zero/parameter_broadcast.h"

#include <algorithm>

namespace distopt {
namespace {

// Without parameters_as_bucket_view: parameters up to this size are packed,
// into buckets up to the larger one. Copying 64 KiB costs about what one
// more collective's latency does on a fast network; 1 MiB buckets make the
// latency a small part of each broadcast and bound the scratch memory.
constexpr int64_t kSmallParameterBytes = int64_t{64} << 10;
constexpr int64_t kSmallBucketBytes = int64_t{1} << 20;

absl::Span<char> BytesOf(Tensor& tensor) {
  return absl::Span<char>(static_cast<char*>(tensor.data()),
                          tensor.byte_size());
}

// One bucket: `owner`'s stepped parameters of `dtype`.
absl::Status BroadcastBucket(Communicator& communicator,
                             const std::vector<Tensor*>& members, int owner,
                             DeviceBuffer* scratch) {
  size_t size = 0;
  for (const Tensor* p : members) size += p->byte_size();
  if (size == 0) return absl::OkStatus();
  Backend& device = scratch->backend();
  // A rank that cannot take part breaks the round (communicator.h).
  absl::StatusOr<absl::Span<char>> bucket = scratch->Elements<char>(size);
  if (!bucket.ok()) return AsCollectiveFailure(bucket.status());
  const bool sending = communicator.rank() == owner;
  absl::Status copied;
  size_t offset = 0;
  if (sending) {
    for (Tensor* p : members) {
      if (copied.ok()) {
        copied = device.CopyWithinDevice(bucket->data() + offset, p->data(),
                                         p->byte_size());
      }
      offset += p->byte_size();
    }
  }
  // A failed pack still takes part, so that no rank waits for the owner.
  absl::Status status = communicator.BroadcastBytes(*bucket, owner);
  if (!status.ok()) return status;
  if (sending) return AsCollectiveFailure(copied);
  offset = 0;
  for (Tensor* p : members) {
    if (copied.ok()) {
      copied = device.CopyWithinDevice(p->data(), bucket->data() + offset,
                                       p->byte_size());
    }
    offset += p->byte_size();
  }
  return AsCollectiveFailure(copied);
}

}  // namespace

absl::Status BroadcastFromOwner(Communicator& communicator,
                                const std::vector<ParamGroup>& groups,
                                const ZeroPartition& partition,
                                const Presence& present, int owner,
                                bool as_buckets, int64_t bucket_bytes,
                                DeviceBuffer* scratch) {
  // In the owner's partition order, which every rank knows.
  std::vector<Tensor*> stepped;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int i : partition.parameters[owner][g]) {
      if (present[g][i]) stepped.push_back(groups[g].params[i]);
    }
  }
  // Which parameters are packed, and into buckets of what size. With
  // parameters_as_bucket_view every one that fits a bucket. Otherwise, as
  // torch does, a broadcast per parameter from its own memory (no copy),
  // except for small ones: a collective's latency for a few KiB each would
  // make a model of many small tensors cost that latency per tensor, so
  // they are packed into buckets of at most kSmallBucketBytes.
  const int64_t bucket =
      as_buckets ? bucket_bytes : std::min(bucket_bytes, kSmallBucketBytes);
  const int64_t packed_up_to =
      as_buckets ? bucket : std::min(bucket, kSmallParameterBytes);
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    std::vector<Tensor*> members;
    size_t size = 0;
    auto flush = [&]() {
      absl::Status status =
          BroadcastBucket(communicator, members, owner, scratch);
      members.clear();
      size = 0;
      return status;
    };
    for (Tensor* p : stepped) {
      if (p->dtype() != dtype || p->byte_size() == 0) continue;
      if (static_cast<int64_t>(p->byte_size()) > packed_up_to) {
        // Not packed: straight from its memory, no copy.
        absl::Status status = communicator.BroadcastBytes(BytesOf(*p), owner);
        if (!status.ok()) return status;
        continue;
      }
      if (static_cast<int64_t>(size + p->byte_size()) > bucket) {
        absl::Status status = flush();
        if (!status.ok()) return status;
      }
      members.push_back(p);
      size += p->byte_size();
    }
    absl::Status status = flush();
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace distopt
