#include "server/zero/parameter_gather.h"

namespace distopt {

absl::Status GatherBucketParameters(Communicator& communicator,
                                    const GradientBucket& bucket,
                                    const std::vector<ParamGroup>& groups) {
  if (bucket.size == 0) return absl::OkStatus();
  // Block r: owner r's parameters (or their slices), in the bucket's order
  // (the same on every rank), each sent from and received into its own
  // tensor.
  std::vector<std::vector<absl::Span<char>>> blocks(communicator.size());
  for (const BucketEntry& entry : bucket.entries) {
    Tensor& p = *groups[entry.group].params[entry.index];
    const size_t element = ElementSize(p.dtype());
    blocks[entry.owner].push_back(
        absl::MakeSpan(static_cast<char*>(p.data()) + entry.begin * element,
                       entry.count * element));
  }
  return communicator.AllGatherSegments(blocks);
}

}  // namespace distopt
