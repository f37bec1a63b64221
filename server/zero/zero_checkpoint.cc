#include "server/zero/zero_checkpoint.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "server/optim/state_dict_checkpoint.h"
#include "server/optim/wire_optimizer.h"
#include "server/zero/zero_checkpoint.pb.h"

namespace distopt {
namespace {

constexpr char kHeader[] = "zero.binpb";
constexpr char kValues[] = "zero.bin";

absl::Status Damaged(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("section ", kHeader, ": ", what));
}

}  // namespace

std::vector<CheckpointSection> ZeroSections(const ZeroCheckpoint& saved) {
  checkpoint::SavedZero header;
  header.set_kind(saved.spec.kind);
  for (const NamedGroupSpec& group : saved.spec.groups) {
    checkpoint::SavedNamedGroup* out = header.add_groups();
    for (const auto& [name, value] : group.hyperparameters) {
      (*out->mutable_hyperparameters())[name] = HyperValueToProto(value);
    }
    for (const std::string& name : group.parameter_names) {
      out->add_parameter_names(name);
    }
  }
  const ZeroOptions& options = saved.spec.options;
  header.set_parameters_as_bucket_view(options.parameters_as_bucket_view);
  header.set_overlap(options.overlap);
  header.set_gradient_sharded(options.gradient_sharded);
  header.set_bucket_bytes(options.bucket_bytes);
  header.set_timeout_ms(absl::ToInt64Milliseconds(saved.spec.timeout));
  header.set_rank(saved.rank);
  header.set_world_size(saved.world_size);
  header.set_steps(saved.steps);
  StateValuesWriter values;
  values.Add(saved.shard, header.mutable_shard());
  return {BytesSection(kHeader, header.SerializeAsString()),
          values.Section(kValues)};
}

absl::StatusOr<std::optional<ZeroCheckpoint>> ReadZeroCheckpoint(
    const CheckpointSections& sections) {
  if (!sections.Has(kHeader)) return std::nullopt;
  absl::StatusOr<std::string> bytes = sections.ReadAll(kHeader);
  if (!bytes.ok()) return bytes.status();
  checkpoint::SavedZero header;
  if (!header.ParseFromString(*bytes)) return Damaged("not a SavedZero");
  if (header.rank() < 0 || header.world_size() < 1 ||
      header.rank() >= header.world_size() || header.steps() < 0) {
    return Damaged(absl::StrCat("rank ", header.rank(), " of ",
                                header.world_size(), " at step ",
                                header.steps()));
  }
  ZeroCheckpoint saved;
  saved.spec.kind = header.kind();
  for (const checkpoint::SavedNamedGroup& group : header.groups()) {
    NamedGroupSpec out;
    absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> values =
        HyperparametersFromProto(group.hyperparameters(), "hyperparameters");
    if (!values.ok()) return Damaged(values.status().message());
    out.hyperparameters = *std::move(values);
    out.parameter_names.assign(group.parameter_names().begin(),
                               group.parameter_names().end());
    saved.spec.groups.push_back(std::move(out));
  }
  saved.spec.options.parameters_as_bucket_view =
      header.parameters_as_bucket_view();
  saved.spec.options.overlap = header.overlap();
  saved.spec.options.gradient_sharded = header.gradient_sharded();
  saved.spec.options.bucket_bytes = header.bucket_bytes();
  saved.spec.timeout = absl::Milliseconds(header.timeout_ms());
  saved.rank = header.rank();
  saved.world_size = header.world_size();
  saved.steps = header.steps();
  absl::StatusOr<std::vector<OptimizerStateDict>> shard =
      ReadStateDicts({&header.shard()}, sections, kValues);
  if (!shard.ok()) return shard.status();
  saved.shard = std::move((*shard)[0]);
  return saved;
}

}  // namespace distopt
