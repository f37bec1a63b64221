// Parameter groups named by a data-parallel request (ZeRO, post-local SGD):
// finding the daemon's parameters by name, the tensors an optimizer works
// on, and the gradients an autograd context holds for them.
#ifndef DISTOPT_SERVER_ZERO_NAMED_GROUPS_H_
#define DISTOPT_SERVER_ZERO_NAMED_GROUPS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/autograd/context.h"
#include "server/optim/hyperparameters.h"
#include "server/parameter_store.h"
#include "server/zero/zero_specification.h"

namespace distopt {

struct NamedGroupSpec {
  absl::flat_hash_map<std::string, HyperValue> hyperparameters;
  std::vector<std::string> parameter_names;
};

using ParameterGroups = std::vector<std::vector<std::shared_ptr<Parameter>>>;

// The parameters `specs` name; the groups are numbered from `first_group` in
// messages. NOT_FOUND for an unknown name; INVALID_ARGUMENT for a parameter
// named twice or already in `taken`.
absl::StatusOr<ParameterGroups> FindNamedGroups(
    ParameterStore& store, const std::vector<NamedGroupSpec>& specs,
    size_t first_group, const ParameterGroups& taken = {});

std::vector<std::shared_ptr<Parameter>> Flatten(const ParameterGroups& groups);

// The optimizer's view of one group: its parameters' tensors, whose locks
// the caller holds.
ZeroParamGroup ToTensorGroup(
    const NamedGroupSpec& spec,
    const std::vector<std::shared_ptr<Parameter>>& parameters);

// After a step, under the parameters' locks.
void BumpVersions(const std::vector<std::shared_ptr<Parameter>>& parameters);

// What `context` holds for each parameter; `pointers` point into `values`
// (null where it holds none).
struct GroupGradients {
  std::vector<std::vector<std::optional<Tensor>>> values;
  std::vector<std::vector<const Tensor*>> pointers;
};
void CollectGradients(const AutogradContext& context,
                      const ParameterGroups& groups, GroupGradients* out);

}  // namespace distopt

#endif  // DISTOPT_SERVER_ZERO_NAMED_GROUPS_H_
