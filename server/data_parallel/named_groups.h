// Parameter groups named in a data-parallel request (parameters by name,
// with each group's hyperparameters): finding the daemon's parameters, the
// tensors an optimizer works on, and the gradients an autograd context
// holds for them.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_NAMED_GROUPS_H_
#define DISTOPT_SERVER_DATA_PARALLEL_NAMED_GROUPS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/autograd/context.h"
#include "server/data_parallel/param_groups.h"
#include "server/optim/hyperparameters.h"
#include "server/params/parameter_store.h"

namespace distopt {

struct NamedGroupSpec {
  absl::flat_hash_map<std::string, HyperValue> hyperparameters;
  std::vector<std::string> parameter_names;
};

using ParameterGroups = std::vector<std::vector<std::shared_ptr<Parameter>>>;

// "[a, b] [c]": the groups' parameter names, for messages and comparisons.
std::string DescribeGroupNames(const std::vector<NamedGroupSpec>& specs);

// The parameters `specs` name; the groups are numbered from `first_group` in
// messages. NOT_FOUND for an unknown name; INVALID_ARGUMENT for a parameter
// named twice or already in `taken`.
absl::StatusOr<ParameterGroups> FindNamedGroups(
    const ParameterStore& store, const std::vector<NamedGroupSpec>& specs,
    size_t first_group, const ParameterGroups& taken = {});

std::vector<std::shared_ptr<Parameter>> Flatten(const ParameterGroups& groups);

// The optimizer's view of the groups: their parameters' tensors (whose
// locks the caller holds) with the hyperparameters of `specs`.
std::vector<ParamGroup> ToParamGroups(const std::vector<NamedGroupSpec>& specs,
                                      const ParameterGroups& groups);

// What an autograd context holds for each parameter of the groups;
// `pointers` point into `values` (null where it holds none).
struct GroupGradients {
  std::vector<std::vector<std::optional<Tensor>>> values;
  GroupGradientPointers pointers;
};
void CollectGradients(const AutogradContext& context,
                      const ParameterGroups& groups, GroupGradients* out);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_NAMED_GROUPS_H_
