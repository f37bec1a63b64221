// The parameter groups of a data-parallel optimizer (ZeRO, post-local SGD)
// as its ranks see them: tensors with each group's hyperparameters. What
// every rank must agree on (the optimizer kind, the groups with their
// hyperparameters, dtypes and shapes; each optimizer adds its options) is
// described in parts for CheckSameOnEveryRank (comm/agreement.h), which
// finds a mismatch on every rank and names it on each.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_PARAM_GROUPS_H_
#define DISTOPT_SERVER_DATA_PARALLEL_PARAM_GROUPS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/memory_budget.h"
#include "common/tensor.h"
#include "server/comm/agreement.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/hyperparameters.h"

namespace distopt {

// One group of parameters with its hyperparameters, as torch's
// param_groups.
struct ParamGroup {
  absl::flat_hash_map<std::string, HyperValue> hyperparameters;
  // float32, float16 or bfloat16, on the rank's device (host memory or one
  // GPU), owned by the caller.
  std::vector<Tensor*> params;
  // The parameters' names, where the group was named (params[i] is
  // names[i]): ranks must agree on them, not only on dtypes and shapes.
  std::vector<std::string> names;
};

// grads[g][i] for params[g][i] of a step; null where this rank has none.
using GroupGradientPointers = std::vector<std::vector<const Tensor*>>;

// INVALID_ARGUMENT naming "groups[g].params[i]" (g counted from
// `first_group`) for a parameter that is not float32, float16 or bfloat16,
// or not on `device` (the device of the rank's tensor collectives).
absl::Status CheckFloatingParameters(const std::vector<ParamGroup>& groups,
                                     size_t first_group, const Device& device);

// INVALID_ARGUMENT naming "grads[g][i]" unless `grads` has one entry per
// parameter of `groups`, each null or of its parameter's dtype and shape.
absl::Status CheckGradients(const std::vector<ParamGroup>& groups,
                            const GroupGradientPointers& grads);

// The kind and the groups; `first_group` numbers the groups in the text
// (for a group added later). Each group's hyperparameters are described
// with `kind`'s defaults filled in, so that a rank that gives a default's
// value and one that leaves it out agree, as torch's param_groups hold
// every value either way.
SpecificationParts DescribeSpecification(const OptimizerKind& kind,
                                         const std::string& kind_name,
                                         const std::vector<ParamGroup>& groups,
                                         int first_group = 0);

// Every parameter's global position (torch's state dict keys: groups in
// order, parameters in order within each), per group.
std::vector<std::vector<int64_t>> GlobalPositions(
    const std::vector<ParamGroup>& groups);

// An optimizer of `kind` over group.params[i] for i in `indices` (in that
// order), with the group's hyperparameters, its state on `device` (the
// parameters') reserved in `budget` (null for none). Errors name
// "groups[<number>].hyperparameters".
absl::StatusOr<std::unique_ptr<FunctionalOptimizer>> CreateGroupOptimizer(
    const OptimizerKind* kind, const ParamGroup& group,
    const std::vector<int>& indices, size_t number, const Device& device,
    MemoryBudget* budget);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_PARAM_GROUPS_H_
