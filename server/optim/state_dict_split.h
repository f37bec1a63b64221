// An optimizer state dict over several parameter groups, in torch's layout
// (state keyed by global position: groups in order, parameters in order
// within each), split into one dict per group for the FunctionalOptimizers
// that hold the groups (positions 0..n-1 each), and merged back.
//
// `held[g]` lists, in the local optimizer's order, the global positions of
// the parameters of group g that this process's optimizer holds (all of the
// group's, or, under ZeRO, this rank's share).
#ifndef DISTOPT_SERVER_OPTIM_STATE_DICT_SPLIT_H_
#define DISTOPT_SERVER_OPTIM_STATE_DICT_SPLIT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/optim/functional_optimizer.h"

namespace distopt {

// The state dicts of optimizers[g] (group g's) merged: state at global
// positions, with the param groups' hyperparameters and
// `group_positions[g]` (every position of group g).
absl::StatusOr<OptimizerStateDict> MergeStateDicts(
    const std::vector<FunctionalOptimizer*>& optimizers,
    const std::string& kind, const std::vector<std::vector<int64_t>>& held,
    const std::vector<std::vector<int64_t>>& group_positions);

// INVALID_ARGUMENT naming the field when the groups, their positions or a
// state entry's position do not fit `group_positions`.
absl::StatusOr<std::vector<OptimizerStateDict>> SplitStateDict(
    const OptimizerStateDict& whole,
    const std::vector<std::vector<int64_t>>& held,
    const std::vector<std::vector<int64_t>>& group_positions);

// Loads shares[g] into optimizers[g], all or nothing: on a refusal the ones
// already loaded get their old state back. `where` goes into the messages.
// Returns the old states, for a caller that must undo the load later.
absl::StatusOr<std::vector<OptimizerStateDict>> LoadAllOrNothing(
    const std::vector<FunctionalOptimizer*>& optimizers,
    const std::string& kind, const std::vector<OptimizerStateDict>& shares,
    absl::string_view where);

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_STATE_DICT_SPLIT_H_
