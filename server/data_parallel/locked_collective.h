// How a data-parallel optimizer (ZeRO, post-local SGD) runs a call across
// the ranks over this daemon's parameters: the parameters of its groups are
// locked exclusively for the whole call (in id order, see
// params/parameter_update.h), so a forward never sees a step half done and
// no other update interleaves; the call runs on the group's communicators
// (serialised with the daemon's other collectives); and when it changed the
// values, their versions move on, so a backward recorded before is refused.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_LOCKED_COLLECTIVE_H_
#define DISTOPT_SERVER_DATA_PARALLEL_LOCKED_COLLECTIVE_H_

#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/autograd/context.h"
#include "server/comm/communicator_group.h"
#include "server/comm/group_membership.h"
#include "server/data_parallel/named_groups.h"

namespace distopt {

// `run` sets `*changed` when it changed the parameters' values, or may
// have, having failed half-way: their versions then move on, whether it
// succeeded or not.
absl::Status RunLockedCollective(
    GroupMembership& group, absl::Duration timeout,
    const ParameterGroups& parameters,
    absl::FunctionRef<absl::Status(CommunicatorGroup&, bool* changed)> run);

// Before a Create's (or an AddParamGroup's) collectives: the parameters
// `specs` name (FindNamedGroups, from `first_group`, none of `taken`),
// once every rank has passed its own checks of the request (`refused`:
// the kind, the options, none made yet; then the names). A rank that
// refused returns its own error; every other rank learns of it at once,
// FAILED_PRECONDITION naming that rank, instead of waiting in the first
// collective of the call until its timeout.
absl::StatusOr<ParameterGroups> FindGroupsOnEveryRank(
    GroupMembership& group, absl::Duration timeout, const ParameterStore& store,
    const std::vector<NamedGroupSpec>& specs, const absl::Status& refused,
    size_t first_group = 0, const ParameterGroups& taken = {});

// A step: `step` gets the gradients `context` holds for `parameters`,
// collected before the locks are taken, and `refused`: OK, or why this
// rank refuses the step (no such context), when it has none. A refusing
// rank still takes part in the step's first collective so that the others
// learn of it there, at once, instead of waiting for it until their
// timeout (ZeroOptimizer::Step, LocalSgdOptimizer::Step). The values
// changed when it succeeded, or when it failed and `torn()` says it had
// begun changing them.
absl::Status RunCollectiveStep(
    GroupMembership& group, absl::Duration timeout,
    const absl::StatusOr<std::shared_ptr<AutogradContext>>& context,
    const ParameterGroups& parameters,
    absl::FunctionRef<absl::Status(CommunicatorGroup&,
                                   const GroupGradientPointers&,
                                   const absl::Status& refused)>
        step,
    absl::FunctionRef<bool()> torn);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_LOCKED_COLLECTIVE_H_
