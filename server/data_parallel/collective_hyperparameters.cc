#include "server/data_parallel/collective_hyperparameters.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/comm/agreement.h"

namespace distopt {

absl::Status SetHyperparametersOnEveryRank(
    Communicator& communicator,
    const std::vector<std::unique_ptr<FunctionalOptimizer>>& optimizers,
    int group, const absl::flat_hash_map<std::string, HyperValue>& changes) {
  absl::Status same = CheckSameOnEveryRank(
      communicator, {{"hyperparameter changes",
                      absl::StrCat("group ", group, ": ",
                                   DescribeHyperparameters(changes))}});
  if (!same.ok()) return same;
  // The same index everywhere, and the ranks have the same groups: a bad
  // one is refused alike on every rank.
  if (group < 0 || group >= static_cast<int>(optimizers.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group: ", group, "; expected 0 to ", optimizers.size() - 1));
  }
  FunctionalOptimizer& optimizer = *optimizers[group];
  const absl::flat_hash_map<std::string, HyperValue> old =
      optimizer.hyperparameters().values();
  absl::Status local = optimizer.SetHyperparameters(changes);
  if (!local.ok()) {
    local = absl::Status(
        local.code(),
        absl::StrCat("groups[", group, "].hyperparameters: ", local.message()));
  }
  absl::Status agreed =
      AgreeOnEveryRank(communicator, local, "hyperparameters");
  if (!agreed.ok() && local.ok()) {
    // Another rank refused: back to the values all ranks still share.
    optimizer.SetHyperparameters(old).IgnoreError();
  }
  return agreed;
}

}  // namespace distopt
