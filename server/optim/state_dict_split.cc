#include "server/optim/state_dict_split.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace distopt {

absl::StatusOr<OptimizerStateDict> MergeStateDicts(
    const std::vector<FunctionalOptimizer*>& optimizers,
    const std::string& kind, const std::vector<std::vector<int64_t>>& held,
    const std::vector<std::vector<int64_t>>& group_positions) {
  std::vector<OptimizerStateDict> locals;
  for (const FunctionalOptimizer* optimizer : optimizers) {
    absl::StatusOr<OptimizerStateDict> local = optimizer->StateDict(kind);
    if (!local.ok()) return local.status();
    locals.push_back(*std::move(local));
  }
  OptimizerStateDict whole;
  whole.kind = kind;
  for (size_t g = 0; g < locals.size(); ++g) {
    for (auto& [index, entry] : locals[g].state) {
      whole.state[held[g][index]] = std::move(entry);
    }
    OptimizerStateDict::ParamGroup group;
    if (!locals[g].param_groups.empty()) {
      group.hyperparameters = locals[g].param_groups[0].hyperparameters;
    }
    group.params = group_positions[g];
    whole.param_groups.push_back(std::move(group));
  }
  return whole;
}

absl::StatusOr<std::vector<OptimizerStateDict>> SplitStateDict(
    const OptimizerStateDict& whole,
    const std::vector<std::vector<int64_t>>& held,
    const std::vector<std::vector<int64_t>>& group_positions) {
  if (whole.param_groups.size() != group_positions.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("state_dict.param_groups: ", whole.param_groups.size(),
                     " groups; expected ", group_positions.size()));
  }
  int64_t positions = 0;
  for (size_t g = 0; g < group_positions.size(); ++g) {
    std::vector<int64_t> listed = whole.param_groups[g].params;
    std::sort(listed.begin(), listed.end());
    if (listed != group_positions[g]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "state_dict.param_groups[", g, "].params: [",
          absl::StrJoin(whole.param_groups[g].params, ", "), "]; expected [",
          absl::StrJoin(group_positions[g], ", "), "] in some order"));
    }
    positions += listed.size();
  }
  for (const auto& [position, entry] : whole.state) {
    if (position < 0 || position >= positions) {
      return absl::InvalidArgumentError(
          absl::StrCat("state_dict.state[", position,
                       "]: no such parameter; expected 0 to ", positions - 1));
    }
  }
  std::vector<OptimizerStateDict> shares;
  for (size_t g = 0; g < held.size(); ++g) {
    OptimizerStateDict share;
    share.kind = whole.kind;
    OptimizerStateDict::ParamGroup group;
    group.hyperparameters = whole.param_groups[g].hyperparameters;
    for (size_t j = 0; j < held[g].size(); ++j) {
      group.params.push_back(j);
      auto it = whole.state.find(held[g][j]);
      if (it != whole.state.end()) share.state[j] = it->second;
    }
    share.param_groups.push_back(std::move(group));
    shares.push_back(std::move(share));
  }
  return shares;
}

absl::StatusOr<std::vector<OptimizerStateDict>> LoadAllOrNothing(
    const std::vector<FunctionalOptimizer*>& optimizers,
    const std::string& kind, const std::vector<OptimizerStateDict>& shares,
    absl::string_view where) {
  std::vector<OptimizerStateDict> backups;
  for (const FunctionalOptimizer* optimizer : optimizers) {
    absl::StatusOr<OptimizerStateDict> backup = optimizer->StateDict(kind);
    if (!backup.ok()) return backup.status();
    backups.push_back(*std::move(backup));
  }
  for (size_t g = 0; g < optimizers.size(); ++g) {
    absl::Status status = optimizers[g]->LoadStateDict(kind, shares[g]);
    if (status.ok()) continue;
    for (size_t done = 0; done < g; ++done) {
      // Each optimizer's own state always fits it.
      optimizers[done]->LoadStateDict(kind, backups[done]).IgnoreError();
    }
    return absl::Status(status.code(),
                        absl::StrCat("state_dict.param_groups[", g, "] ", where,
                                     ": ", status.message()));
  }
  return backups;
}

}  // namespace distopt
