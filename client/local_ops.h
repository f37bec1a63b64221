// The few local ops a trainer needs between remote layers, recorded on the
// context's tape like torch.relu and F.cross_entropy.
#ifndef DISTOPT_CLIENT_LOCAL_OPS_H_
#define DISTOPT_CLIENT_LOCAL_OPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "client/dist_autograd_context.h"

namespace distopt {

// max(x, 0), float32.
Variable Relu(DistAutogradContext& context, const Variable& x);

struct CrossEntropyResult {
  Variable loss;  // 0-d float32: the mean over the batch.
  // Predicted class per row (argmax of the logits).
  std::vector<int64_t> predictions;
};

// Softmax cross-entropy of float32 logits [N, C] against labels in [0, C),
// averaged over the batch, as F.cross_entropy. INVALID_ARGUMENT for a
// label out of range or a count mismatch.
absl::StatusOr<CrossEntropyResult> SoftmaxCrossEntropy(
    DistAutogradContext& context, const Variable& logits,
    const std::vector<int64_t>& labels);

}  // namespace distopt

#endif  // DISTOPT_CLIENT_LOCAL_OPS_H_
