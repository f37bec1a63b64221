#include "server/data_parallel/locked_collective.h"

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
    const AutogradContext& context, const ParameterGroups& parameters,
    absl::FunctionRef<absl::Status(CommunicatorGroup&,
                                   const GroupGradientPointers&)>
        step,
    absl::FunctionRef<bool()> torn) {
  GroupGradients gradients;
  CollectGradients(context, parameters, &gradients);
  return RunLockedCollective(
      group, timeout, parameters,
      [&](CommunicatorGroup& communicators, bool* changed) {
        absl::Status status = step(communicators, gradients.pointers);
        *changed = status.ok() || torn();
        return status;
      });
}

absl::Status AgreeBeforeCreating(GroupMembership& group, absl::Duration timeout,
                                 const absl::Status& local) {
  absl::Status agreed = group.Run(timeout, [&](Communicator& communicator) {
    return AgreeOnEveryRank(communicator, local, "the request",
                            "nothing was created");
  });
  // The group's own failure (a lost peer) says less than this rank's.
  return local.ok() ? agreed : local;
}

}  // namespace distopt
