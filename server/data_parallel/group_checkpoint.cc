#include "server/data_parallel/group_checkpoint.h"

#include "absl/strings/str_cat.h"
#include "common/cpu_backend.h"
#include "server/data_parallel/named_groups_proto.h"

namespace distopt {

absl::Status CloneStateBuffers(GroupCheckpoint* checkpoint) {
  for (auto& [position, entry] : checkpoint->state.state) {
    for (auto& [name, buffer] : entry.buffers) {
      absl::StatusOr<Tensor> values = buffer.CloneTo(CpuBackend());
      if (!values.ok()) return values.status();
      buffer = *std::move(values);
    }
  }
  return absl::OkStatus();
}

void WriteGroupCheckpoint(const GroupCheckpoint& checkpoint,
                          checkpoint::SavedGroupOptimizer* saved,
                          StateValuesWriter* values) {
  saved->set_kind(checkpoint.kind);
  for (const NamedGroupSpec& group : checkpoint.groups) {
    NamedGroupToProto(group, saved->add_groups());
  }
  saved->set_timeout_ms(absl::ToInt64Milliseconds(checkpoint.timeout));
  saved->set_rank(checkpoint.rank);
  saved->set_world_size(checkpoint.world_size);
  saved->set_step(checkpoint.step);
  values->Add(checkpoint.state, saved->mutable_state());
  for (const std::string& dir : checkpoint.run.rank_dirs) {
    saved->add_rank_checkpoint_dirs(dir);
  }
  saved->set_run_id(checkpoint.run.run_id);
}

absl::StatusOr<std::optional<GroupCheckpoint>> ReadGroupCheckpoint(
    const checkpoint::SavedGroupOptimizer& saved,
    const CheckpointSections& sections, const std::string& header_section,
    const std::string& values_section, const GroupCheckpointFilter& wanted) {
  auto damaged = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("section ", header_section, ": ", what));
  };
  if (saved.rank() < 0 || saved.world_size() < 1 ||
      saved.rank() >= saved.world_size() || saved.step() < 0) {
    return damaged(absl::StrCat("rank ", saved.rank(), " of ",
                                saved.world_size(), " at step ", saved.step()));
  }
  if (saved.rank_checkpoint_dirs_size() != 0 &&
      saved.rank_checkpoint_dirs_size() != saved.world_size()) {
    return damaged(
        absl::StrCat("a manifest of ", saved.rank_checkpoint_dirs_size(),
                     " folders for world size ", saved.world_size()));
  }
  if (wanted != nullptr && !wanted(saved)) return std::nullopt;
  GroupCheckpoint checkpoint;
  checkpoint.kind = saved.kind();
  absl::StatusOr<std::vector<NamedGroupSpec>> groups =
      NamedGroupsFromProto(saved.groups());
  if (!groups.ok()) return damaged(groups.status().message());
  checkpoint.groups = *std::move(groups);
  checkpoint.timeout = absl::Milliseconds(saved.timeout_ms());
  checkpoint.rank = saved.rank();
  checkpoint.world_size = saved.world_size();
  checkpoint.step = saved.step();
  absl::StatusOr<std::vector<OptimizerStateDict>> state =
      ReadStateDicts({&saved.state()}, sections, values_section);
  if (!state.ok()) return state.status();
  checkpoint.state = std::move((*state)[0]);
  checkpoint.run.rank_dirs.assign(saved.rank_checkpoint_dirs().begin(),
                                  saved.rank_checkpoint_dirs().end());
  checkpoint.run.run_id = saved.run_id();
  return std::optional<GroupCheckpoint>(std::move(checkpoint));
}

}  // namespace distopt
