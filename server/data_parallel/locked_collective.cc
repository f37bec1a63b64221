#include "server/data_parallel/locked_collective.h"

#include "server/params/parameter_update.h"

namespace distopt {

absl::Status RunLockedCollective(
    GroupMembership& group, absl::Duration timeout,
    const ParameterGroups& parameters,
    absl::FunctionRef<absl::StatusOr<bool>(CommunicatorGroup&)> run) {
  ParameterUpdate update(Flatten(parameters));
  bool changed = false;
  absl::Status status =
      group.RunInGroup(timeout, [&](CommunicatorGroup& communicators) {
        absl::StatusOr<bool> ran = run(communicators);
        if (!ran.ok()) return ran.status();
        changed = *ran;
        return absl::OkStatus();
      });
  if (status.ok() && changed) update.CommitAll();
  return status;
}

absl::Status RunCollectiveStep(
    GroupMembership& group, absl::Duration timeout,
    const AutogradContext& context, const ParameterGroups& parameters,
    absl::FunctionRef<absl::Status(CommunicatorGroup&,
                                   const GroupGradientPointers&)>
        step) {
  GroupGradients gradients;
  CollectGradients(context, parameters, &gradients);
  return RunLockedCollective(
      group, timeout, parameters,
      [&](CommunicatorGroup& communicators) -> absl::StatusOr<bool> {
        absl::Status status = step(communicators, gradients.pointers);
        if (!status.ok()) return status;
        return true;
      });
}

}  // namespace distopt
