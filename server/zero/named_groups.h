// What the daemon's data-parallel optimizers (ZeRO, post-local SGD) share:
// the parts of the daemon they use, parameter groups named in a request
// (finding the parameters by name, the tensors an optimizer works on), and
// the gradients an autograd context holds for them.
#ifndef DISTOPT_SERVER_ZERO_NAMED_GROUPS_H_
#define DISTOPT_SERVER_ZERO_NAMED_GROUPS_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/autograd/context.h"
#include "server/autograd/context_table.h"
#include "server/comm/group_membership.h"
#include "server/optim/hyperparameters.h"
#include "server/optim/registry.h"
#include "server/parameter_store.h"
#include "server/zero/zero_specification.h"

namespace distopt {

// The parts of a daemon a data-parallel optimizer uses; all outlive it.
struct RankResources {
  ParameterStore* parameters = nullptr;
  ContextTable* contexts = nullptr;
  const OptimizerRegistry* kinds = nullptr;
  // Null until (unless) the daemon is in a data-parallel group.
  const std::atomic<GroupMembership*>* membership = nullptr;

  // The daemon's group; FAILED_PRECONDITION when it is in none.
  absl::StatusOr<GroupMembership*> Group() const;
  // The autograd context a step takes its gradients from: INVALID_ARGUMENT
  // for a malformed id, NOT_FOUND for an unknown one.
  absl::StatusOr<std::shared_ptr<AutogradContext>> Context(
      uint64_t context_id) const;
};

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
