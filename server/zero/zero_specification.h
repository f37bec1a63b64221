// What every rank of a ZeRO optimizer must agree on (the optimizer kind,
// the parameter groups with their hyperparameters, dtypes and shapes, the
// options), and the check that they do: each rank all-gathers a hash of
// each part, so a mismatch is found on every rank and named on each.
#ifndef DISTOPT_SERVER_ZERO_ZERO_SPECIFICATION_H_
#define DISTOPT_SERVER_ZERO_ZERO_SPECIFICATION_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/tensor.h"
#include "server/comm/agreement.h"
#include "server/optim/hyperparameters.h"

namespace distopt {

struct ZeroParamGroup {
  absl::flat_hash_map<std::string, HyperValue> hyperparameters;
  // Host float32, float16 or bfloat16, owned by the caller.
  std::vector<Tensor*> params;
};

struct ZeroOptions {
  // Parameters reach the other ranks through one flat bucket per (owner
  // rank, dtype) instead of one broadcast per parameter.
  bool parameters_as_bucket_view = false;
  // Gradients are averaged one owner's bucket at a time on a communication
  // thread, so a rank steps its partition while the later buckets are
  // still being reduced.
  bool overlap = false;
};

// INVALID_ARGUMENT naming "groups[g].params[i]" (g counted from
// `first_group`) for a parameter that is not float32, float16 or bfloat16;
// UNIMPLEMENTED for one that is not in host memory.
absl::Status CheckHostFloatingParameters(
    const std::vector<ZeroParamGroup>& groups, size_t first_group);

// INVALID_ARGUMENT naming "grads[g][i]" unless `grads` has one entry per
// parameter of `groups`, each null or of its parameter's dtype and shape.
absl::Status CheckGradients(
    const std::vector<ZeroParamGroup>& groups,
    const std::vector<std::vector<const Tensor*>>& grads);

// `first_group` numbers the groups in the text (for a group added later).
SpecificationParts DescribeSpecification(
    const std::string& kind_name, const std::vector<ZeroParamGroup>& groups,
    const ZeroOptions& options, int first_group = 0);

}  // namespace distopt

#endif  // DISTOPT_SERVER_ZERO_ZERO_SPECIFICATION_H_
