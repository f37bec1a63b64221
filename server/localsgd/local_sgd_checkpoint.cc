#include "server/localsgd/local_sgd_checkpoint.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "server/localsgd/local_sgd_checkpoint.pb.h"
#include "server/optim/state_dict_checkpoint.h"
#include "server/optim/wire_optimizer.h"

namespace distopt {
namespace {

constexpr char kHeader[] = "local_sgd.binpb";
constexpr char kValues[] = "local_sgd.bin";

absl::Status Damaged(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("section ", kHeader, ": ", what));
}

}  // namespace

std::vector<CheckpointSection> LocalSgdSections(
    const LocalSgdCheckpoint& saved) {
  checkpoint::SavedLocalSgd header;
  header.set_kind(saved.spec.kind);
  for (const NamedGroupSpec& group : saved.spec.groups) {
    checkpoint::SavedLocalSgdGroup* out = header.add_groups();
    for (const auto& [name, value] : group.hyperparameters) {
      (*out->mutable_hyperparameters())[name] = HyperValueToProto(value);
    }
    for (const std::string& name : group.parameter_names) {
      out->add_parameter_names(name);
    }
  }
  const LocalSgdOptions& options = saved.spec.options;
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
  header.set_timeout_ms(absl::ToInt64Milliseconds(saved.spec.timeout));
  header.set_rank(saved.rank);
  header.set_world_size(saved.world_size);
  header.set_step(saved.step);
  StateValuesWriter values;
  values.Add(saved.state, header.mutable_state());
  return {BytesSection(kHeader, header.SerializeAsString()),
          values.Section(kValues)};
}

absl::StatusOr<std::optional<LocalSgdCheckpoint>> ReadLocalSgdCheckpoint(
    const CheckpointSections& sections) {
  if (!sections.Has(kHeader)) return std::nullopt;
  absl::StatusOr<std::string> bytes = sections.ReadAll(kHeader);
  if (!bytes.ok()) return bytes.status();
  checkpoint::SavedLocalSgd header;
  if (!header.ParseFromString(*bytes)) return Damaged("not a SavedLocalSgd");
  if (header.rank() < 0 || header.world_size() < 1 ||
      header.rank() >= header.world_size() || header.step() < 0) {
    return Damaged(absl::StrCat("rank ", header.rank(), " of ",
                                header.world_size(), " at step ",
                                header.step()));
  }
  LocalSgdCheckpoint saved;
  saved.spec.kind = header.kind();
  for (const checkpoint::SavedLocalSgdGroup& group : header.groups()) {
    NamedGroupSpec out;
    absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> values =
        HyperparametersFromProto(group.hyperparameters(), "hyperparameters");
    if (!values.ok()) return Damaged(values.status().message());
    out.hyperparameters = *std::move(values);
    out.parameter_names.assign(group.parameter_names().begin(),
                               group.parameter_names().end());
    saved.spec.groups.push_back(std::move(out));
  }
  LocalSgdOptions& options = saved.spec.options;
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
  saved.spec.timeout = absl::Milliseconds(header.timeout_ms());
  saved.rank = header.rank();
  saved.world_size = header.world_size();
  saved.step = header.step();
  absl::StatusOr<std::vector<OptimizerStateDict>> state =
      ReadStateDicts({&header.state()}, sections, kValues);
  if (!state.ok()) return state.status();
  saved.state = std::move((*state)[0]);
  return saved;
}

}  // namespace distopt
