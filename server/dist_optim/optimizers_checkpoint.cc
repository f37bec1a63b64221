#include "server/dist_optim/optimizers_checkpoint.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/dist_optim/optimizers_checkpoint.pb.h"
#include "server/optim/state_dict_checkpoint.h"

namespace distopt {
namespace {

constexpr char kHeader[] = "optimizers.binpb";
constexpr char kValues[] = "optimizers.bin";

}  // namespace

std::vector<CheckpointSection> OptimizerSections(
    const std::vector<OptimizerTable::Saved>& saved, uint64_t next_id) {
  checkpoint::SavedOptimizers header;
  header.set_next_id(next_id);
  StateValuesWriter values;
  for (const OptimizerTable::Saved& one : saved) {
    checkpoint::SavedOptimizer* out = header.add_optimizers();
    out->set_id(one.info.id);
    for (uint64_t id : one.info.parameter_ids) out->add_parameter_ids(id);
    out->set_steps(one.info.steps);
    for (uint64_t context : one.applied) out->add_applied_context_ids(context);
    values.Add(one.state_dict, out->mutable_state_dict());
  }
  return {BytesSection(kHeader, header.SerializeAsString()),
          values.Section(kValues)};
}

absl::Status RestoreOptimizers(const CheckpointSections& sections,
                               OptimizerTable& table,
                               std::vector<std::string>* dropped) {
  checkpoint::SavedOptimizers header;
  absl::StatusOr<bool> saved_any =
      ReadMessageSection(sections, kHeader, &header);
  if (!saved_any.ok() || !*saved_any) return saved_any.status();
  std::vector<const checkpoint::SavedStateDict*> dicts;
  for (const checkpoint::SavedOptimizer& one : header.optimizers()) {
    dicts.push_back(&one.state_dict());
  }
  absl::StatusOr<std::vector<OptimizerStateDict>> state =
      ReadStateDicts(dicts, sections, kValues);
  if (!state.ok()) return state.status();
  std::vector<OptimizerTable::Saved> saved;
  for (int i = 0; i < header.optimizers_size(); ++i) {
    const checkpoint::SavedOptimizer& one = header.optimizers(i);
    OptimizerTable::Saved restored;
    restored.info.id = one.id();
    restored.info.kind = one.state_dict().kind();
    restored.info.parameter_ids.assign(one.parameter_ids().begin(),
                                       one.parameter_ids().end());
    restored.info.steps = one.steps();
    restored.applied.assign(one.applied_context_ids().begin(),
                            one.applied_context_ids().end());
    restored.state_dict = std::move((*state)[i]);
    saved.push_back(std::move(restored));
  }
  return table.Restore(std::move(saved), header.next_id(), dropped);
}

}  // namespace distopt
