// The gradients of one data-parallel step, reduced bucket by bucket so that
// no scratch buffer grows with the model: a plan cuts the parameters that
// have a gradient on some rank into buckets of at most `bucket_elements`
// float32 values (a parameter larger than that gets a bucket of its own),
// every rank planning the same buckets. Within a bucket the parameters are
// grouped by owner rank (block r holds owner r's), so that a reduce-scatter
// of the bucket gives each rank its own parameters' sums; each bucket takes
// about as much from every owner, so that the ring stays balanced. fp16 and
// bf16 gradients are widened, so the average is taken in fp32.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_GRADIENT_BUCKETS_H_
#define DISTOPT_SERVER_DATA_PARALLEL_GRADIENT_BUCKETS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "server/data_parallel/param_groups.h"

namespace distopt {

// present[g][i]: parameter i of group g has a gradient on some rank.
using Presence = std::vector<std::vector<bool>>;

struct BucketEntry {
  int group = 0;
  int index = 0;
  int owner = 0;
  int64_t offset = 0;  // Where its gradient starts in the bucket.
  int64_t count = 0;   // Elements.
};

struct GradientBucket {
  std::vector<BucketEntry> entries;  // By owner, then in plan order.
  std::vector<size_t> blocks;        // Elements per owner rank.
  int64_t size = 0;                  // Elements in all.
};

// owner[g][i] in [0, owners): the rank that owns parameter i of group g
// (every parameter has owner 0 when the whole model is reduced as one).
std::vector<GradientBucket> PlanGradientBuckets(
    const std::vector<ParamGroup>& groups,
    const std::vector<std::vector<int>>& owner, int owners,
    const Presence& present, int64_t bucket_elements);

// The largest bucket of a plan, in elements: the scratch a step needs.
int64_t LargestBucket(const std::vector<GradientBucket>& plan);

// Copies this rank's gradients of the bucket's parameters into `values`
// (bucket.size elements); a null one, for a parameter present elsewhere,
// counts as zeros.
absl::Status FillBucket(const GradientBucket& bucket,
                        const std::vector<ParamGroup>& groups,
                        const GroupGradientPointers& grads,
                        absl::Span<float> values);

// The gradient of `entry` from the bucket's `values`, in its parameter's
// dtype: a view for float32, a copy rounded to nearest even for fp16/bf16.
absl::StatusOr<Tensor> BucketGradient(const BucketEntry& entry,
                                      const std::vector<ParamGroup>& groups,
                                      absl::Span<float> values);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_GRADIENT_BUCKETS_H_
