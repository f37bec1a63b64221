// Changing a parameter group's hyperparameters (an LR schedule, say) on
// every rank of a data-parallel optimizer at once, so that no rank is left
// stepping with the old values.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_COLLECTIVE_HYPERPARAMETERS_H_
#define DISTOPT_SERVER_DATA_PARALLEL_COLLECTIVE_HYPERPARAMETERS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "server/comm/communicator.h"
#include "server/optim/functional_optimizer.h"

namespace distopt {

// Collective: every rank passes the same group index and changes, and
// `optimizers` are its optimizers, one per group. FAILED_PRECONDITION on
// every rank when the ranks' indices or changes differ (checked first, so
// that a bad index on one rank is refused on every rank, and none waits
// for it); INVALID_ARGUMENT naming the index or the hyperparameter for a
// bad value. On any refusal no rank changes.
absl::Status SetHyperparametersOnEveryRank(
    Communicator& communicator,
    const std::vector<std::unique_ptr<FunctionalOptimizer>>& optimizers,
    int group, const absl::flat_hash_map<std::string, HyperValue>& changes);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_COLLECTIVE_HYPERPARAMETERS_H_
