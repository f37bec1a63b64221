#include "server/data_parallel/locked_collective.h"

#include "common/heap_trim.h"
#include "server/comm/agreement.h"
#include "server/params/parameter_update.h"

namespace distopt {

absl::Status RunLockedCollective(
    GroupMembership& group, absl::Duration timeout,
    const ParameterGroups& parameters,
    absl::FunctionRef<absl::Status(CommunicatorGroup&, bool* changed)> run) {
  ParameterUpdate update(Flatten(parameters));
  bool changed = false;
  absl::Status status =
      group.RunInGroup(timeout, [&](CommunicatorGroup& communicators) {
        return run(communicators, &changed);
      });
  if (changed) update.CommitAll();
  return status;
}

absl::Status RunCollectiveStep(
    GroupMembership& group, absl::Duration timeout,
    const absl::StatusOr<std::shared_ptr<AutogradContext>>& context,
    const ParameterGroups& parameters,
    absl::FunctionRef<absl::Status(CommunicatorGroup&,
                                   const GroupGradientPointers&,
                                   const absl::Status& refused)>
        step,
    absl::FunctionRef<bool()> torn) {
  ReturnFreedHeap();  // Before the step's peak (common/heap_trim.h).
  GroupGradients gradients;
  if (context.ok()) {
    CollectGradients(**context, parameters, &gradients);
  } else {
    for (const auto& list : parameters) {
      gradients.pointers.emplace_back(list.size(), nullptr);
    }
  }
  return RunLockedCollective(
      group, timeout, parameters,
      [&](CommunicatorGroup& communicators, bool* changed) {
        absl::Status status =
            step(communicators, gradients.pointers, context.status());
        *changed = status.ok() || torn();
        return status;
      });
}

absl::StatusOr<ParameterGroups> FindGroupsOnEveryRank(
    GroupMembership& group, absl::Duration timeout, const ParameterStore& store,
    const std::vector<NamedGroupSpec>& specs, const absl::Status& refused,
    size_t first_group, const ParameterGroups& taken) {
  absl::StatusOr<ParameterGroups> found =
      refused.ok() ? FindNamedGroups(store, specs, first_group, taken)
                   : absl::StatusOr<ParameterGroups>(refused);
  absl::Status agreed = group.Run(timeout, [&](Communicator& communicator) {
    return AgreeOnEveryRank(communicator, found.status(), "the request",
                            "nothing changed on any rank");
  });
  // The group's own failure (a lost peer) says less than this rank's.
  if (!found.ok()) return found.status();
  if (!agreed.ok()) return agreed;
  return found;
}

}  // namespace distopt
