#include "server/zero/zero_checkpoint.h"

#include "server/zero/zero_checkpoint.pb.h"

namespace distopt {
namespace {

constexpr char kHeader[] = "zero.binpb";
constexpr char kValues[] = "zero.bin";

}  // namespace

std::vector<CheckpointSection> ZeroSections(const ZeroCheckpoint& saved) {
  checkpoint::SavedZero header;
  StateValuesWriter values;
  WriteGroupCheckpoint(saved.group, header.mutable_group(), &values);
  header.set_parameters_as_bucket_view(saved.options.parameters_as_bucket_view);
  header.set_overlap(saved.options.overlap);
  header.set_gradient_sharded(saved.options.gradient_sharded);
  header.set_bucket_bytes(saved.options.bucket_bytes);
  return {BytesSection(kHeader, header.SerializeAsString()),
          values.Section(kValues)};
}

absl::StatusOr<std::optional<ZeroCheckpoint>> ReadZeroCheckpoint(
    const CheckpointSections& sections, const GroupCheckpointFilter& wanted) {
  checkpoint::SavedZero header;
  absl::StatusOr<std::optional<GroupCheckpoint>> group =
      ReadGroupSections(sections, kHeader, kValues, wanted, &header);
  if (!group.ok()) return group.status();
  if (!group->has_value()) return std::nullopt;
  ZeroCheckpoint checkpoint;
  checkpoint.group = **std::move(group);
  checkpoint.options.parameters_as_bucket_view =
      header.parameters_as_bucket_view();
  checkpoint.options.overlap = header.overlap();
  checkpoint.options.gradient_sharded = header.gradient_sharded();
  checkpoint.options.bucket_bytes = header.bucket_bytes();
  return checkpoint;
}

}  // namespace distopt
