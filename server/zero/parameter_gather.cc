#include "server/zero/parameter_gather.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace distopt {

absl::Status GatherBucketParameters(Communicator& communicator,
                                    const GradientBucket& bucket,
                                    const std::vector<ParamGroup>& groups,
                                    absl::Span<char> scratch) {
  if (bucket.size == 0) return absl::OkStatus();
  // The entries are by owner in rank order, so their bytes laid end to end
  // make the blocks.
  std::vector<size_t> block_bytes(communicator.size(), 0);
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const BucketEntry& entry : bucket.entries) {
    const size_t bytes = groups[entry.group].params[entry.index]->byte_size();
    offsets.push_back(total);
    block_bytes[entry.owner] += bytes;
    total += bytes;
  }
  if (total > scratch.size()) {
    return absl::InternalError(
        absl::StrCat("zero: the bucket's parameters take ", total,
                     " bytes; its scratch holds ", scratch.size()));
  }
  const int rank = communicator.rank();
  for (size_t e = 0; e < bucket.entries.size(); ++e) {
    const BucketEntry& entry = bucket.entries[e];
    if (entry.owner != rank) continue;
    const Tensor& p = *groups[entry.group].params[entry.index];
    std::memcpy(scratch.data() + offsets[e], p.data(), p.byte_size());
  }
  absl::Status status =
      communicator.AllGatherBlocks(scratch.subspan(0, total), block_bytes);
  if (!status.ok()) return status;
  for (size_t e = 0; e < bucket.entries.size(); ++e) {
    const BucketEntry& entry = bucket.entries[e];
    if (entry.owner == rank) continue;
    Tensor& p = *groups[entry.group].params[entry.index];
    std::memcpy(p.data(), scratch.data() + offsets[e], p.byte_size());
  }
  return absl::OkStatus();
}

}  // namespace distopt
