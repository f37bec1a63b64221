#include "server/localsgd/local_sgd_checkpoint.h"

#include "server/localsgd/local_sgd_checkpoint.pb.h"

namespace distopt {
namespace {

constexpr char kHeader[] = "local_sgd.binpb";
constexpr char kValues[] = "local_sgd.bin";

}  // namespace

std::vector<CheckpointSection> LocalSgdSections(
    const LocalSgdCheckpoint& saved) {
  checkpoint::SavedLocalSgd header;
  StateValuesWriter values;
  WriteGroupCheckpoint(saved.group, header.mutable_group(), &values);
  const LocalSgdOptions& options = saved.options;
  header.set_hierarchical(options.averager.kind ==
                          AveragerSpec::Kind::kHierarchical);
  for (const auto& [period, group_size] : options.averager.periods) {
    checkpoint::SavedAveragingPeriod* out = header.add_periods();
    out->set_period(period);
    out->set_group_size(group_size);
  }
  header.set_warmup_steps(options.averager.warmup_steps);
  header.set_start_localsgd_iter(options.start_localsgd_iter);
  header.set_post_local_gradient_allreduce(
      options.post_local_gradient_allreduce);
  header.set_subgroup_size(options.subgroup_size);
  header.set_bucket_bytes(options.bucket_bytes);
  return {BytesSection(kHeader, header.SerializeAsString()),
          values.Section(kValues)};
}

absl::StatusOr<std::optional<LocalSgdCheckpoint>> ReadLocalSgdCheckpoint(
    const CheckpointSections& sections, const GroupCheckpointFilter& wanted) {
  checkpoint::SavedLocalSgd header;
  absl::StatusOr<std::optional<GroupCheckpoint>> group =
      ReadGroupSections(sections, kHeader, kValues, wanted, &header);
  if (!group.ok()) return group.status();
  if (!group->has_value()) return std::nullopt;
  LocalSgdCheckpoint checkpoint;
  checkpoint.group = **std::move(group);
  LocalSgdOptions& options = checkpoint.options;
  options.averager.kind = header.hierarchical()
                              ? AveragerSpec::Kind::kHierarchical
                              : AveragerSpec::Kind::kPeriodic;
  for (const checkpoint::SavedAveragingPeriod& period : header.periods()) {
    options.averager.periods.emplace_back(period.period(), period.group_size());
  }
  options.averager.warmup_steps = header.warmup_steps();
  options.start_localsgd_iter = header.start_localsgd_iter();
  options.post_local_gradient_allreduce =
      header.post_local_gradient_allreduce();
  options.subgroup_size = header.subgroup_size();
  options.bucket_bytes = header.bucket_bytes();
  return checkpoint;
}

}  // namespace distopt
