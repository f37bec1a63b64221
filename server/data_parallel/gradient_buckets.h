// The gradients of one data-parallel step in one flat float32 buffer, laid
// out bucket by bucket: the caller says which bucket each parameter goes
// to (ZeRO: its owner rank, so a rank can step its partition as soon as its
// own bucket is reduced; post-local SGD: one bucket), and the buffer can be
// averaged whole or bucket by bucket. Only parameters with a gradient on
// some rank have a slot. fp16 and bf16 gradients are widened, so the
// average is taken in fp32.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_GRADIENT_BUCKETS_H_
#define DISTOPT_SERVER_DATA_PARALLEL_GRADIENT_BUCKETS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "server/data_parallel/param_groups.h"

namespace distopt {

// present[g][i]: parameter i of group g has a gradient on some rank.
using Presence = std::vector<std::vector<bool>>;

class GradientBuckets {
 public:
  // bucket_of[g][i] in [0, buckets): the bucket of parameter i of group g.
  // `groups` and `storage` must outlive the buckets. The values live in
  // `storage`, kept by the caller from step to step: a fresh buffer of the
  // model's size would cost its page faults on every step.
  GradientBuckets(const std::vector<ParamGroup>& groups,
                  const std::vector<std::vector<int>>& bucket_of, int buckets,
                  const Presence& present, std::vector<float>* storage);

  // Copies this rank's gradients in (a null one, for a parameter present
  // elsewhere, counts as zeros). Every slot is written.
  absl::Status Fill(const GroupGradientPointers& grads);

  absl::Span<float> all() { return values_; }
  absl::Span<float> bucket(int index);

  // The gradient of parameter i of group g in the parameter's dtype: a view
  // for float32, a copy rounded to nearest even for fp16 and bf16.
  // Only for present parameters.
  absl::StatusOr<Tensor> Gradient(int g, int i);

 private:
  const std::vector<ParamGroup>& groups_;
  // [g][i]: where the gradient starts in values_; -1 when absent.
  std::vector<std::vector<int64_t>> offset_;
  // bucket b is [begin_[b], begin_[b + 1]).
  std::vector<int64_t> begin_;
  absl::Span<float> values_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_GRADIENT_BUCKETS_H_
