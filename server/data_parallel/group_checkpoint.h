// What a rank's checkpoint of a group optimizer (ZeRO, post-local SGD)
// holds besides the optimizer's own options: its kind and groups, where in
// the group the rank was and at which group step, and the rank's state.
// Each optimizer's checkpoint embeds a SavedGroupOptimizer in its header
// section and writes the state's values to its values section.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_GROUP_CHECKPOINT_H_
#define DISTOPT_SERVER_DATA_PARALLEL_GROUP_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/data_parallel/group_checkpoint.pb.h"
#include "server/data_parallel/named_groups.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/state_dict_checkpoint.h"
#include "server/params/checkpoint.h"

namespace distopt {

// What a group optimizer's checkpoints carry from its creation: the
// manifest (every rank's checkpoint folder, by rank; empty unless every
// rank has one) and the run (one creation of the group's optimizer, by a
// random id the ranks share: group steps are compared within a run, since
// a rank that fell back to an older step keeps newer checkpoints of the
// run the group abandoned; 0 in older checkpoints).
struct GroupRun {
  std::vector<std::string> rank_dirs;
  uint64_t run_id = 0;
};

struct GroupCheckpoint {
  std::string kind;
  std::vector<NamedGroupSpec> groups;  // With every group added since.
  absl::Duration timeout;
  int rank = 0;
  int world_size = 0;
  int64_t step = 0;  // The group's.
  // This rank's: ZeRO's shard (at global positions), or post-local SGD's
  // local state.
  OptimizerStateDict state;
  GroupRun run;
  // Not saved: set on a checkpoint a live rank re-read (a replaced peer
  // makes the group resume from its last group checkpoint), whose
  // parameters have moved on since: the resume reads their saved values.
  bool parameters_moved_on = false;
};

// A group optimizer's part of a checkpoint's cut (the runners' Snapshot),
// with the runner's lock held: the created optimizer's checkpoint, made
// by `live` (its damage is checked again in the cut: a step that failed
// half-way since the save began left the model torn), or, before its
// Create, a deep copy of the `restored` one (so that saves before then do
// not rotate it away), or none; then `while_stopped` runs (the copy of the
// parameters) before any step can.
template <typename Checkpoint, typename Live>
absl::StatusOr<std::optional<Checkpoint>> SnapshotGroupOptimizer(
    bool created, const absl::Status& damage, Live live,
    const std::optional<Checkpoint>& restored,
    absl::FunctionRef<absl::Status()> while_stopped);

// Gives `checkpoint`'s state buffers copies of their own.
absl::Status CloneStateBuffers(GroupCheckpoint* checkpoint);

// A deep copy of a group optimizer's checkpoint (ZeroCheckpoint,
// LocalSgdCheckpoint: a GroupCheckpoint `group` and its options): a
// restored checkpoint saved again while its group has not resumed yet,
// whose buffers the resumed optimizer then takes over and steps.
template <typename Checkpoint>
absl::StatusOr<Checkpoint> DeepCopy(const Checkpoint& checkpoint) {
  Checkpoint copy = checkpoint;
  absl::Status cloned = CloneStateBuffers(&copy.group);
  if (!cloned.ok()) return cloned;
  return copy;
}

void WriteGroupCheckpoint(const GroupCheckpoint& checkpoint,
                          checkpoint::SavedGroupOptimizer* saved,
                          StateValuesWriter* values);

// Which checkpoints a reader wants, told from their headers (the values
// of the others are not read).
using GroupCheckpointFilter =
    std::function<bool(const checkpoint::SavedGroupOptimizer&)>;

// DATA_LOSS naming `header_section` (or the values section) for damage.
// nullopt when `wanted` (if given) does not want it.
absl::StatusOr<std::optional<GroupCheckpoint>> ReadGroupCheckpoint(
    const checkpoint::SavedGroupOptimizer& saved,
    const CheckpointSections& sections, const std::string& header_section,
    const std::string& values_section,
    const GroupCheckpointFilter& wanted = nullptr);

// Reads a group optimizer's header section `header_section` into `header`
// (a message whose group() is its SavedGroupOptimizer), then its group
// part: nullopt when the checkpoint has no such section, or `wanted` does
// not want it.
template <typename Header>
absl::StatusOr<std::optional<GroupCheckpoint>> ReadGroupSections(
    const CheckpointSections& sections, const std::string& header_section,
    const std::string& values_section, const GroupCheckpointFilter& wanted,
    Header* header) {
  absl::StatusOr<bool> saved =
      ReadMessageSection(sections, header_section, header);
  if (!saved.ok()) return saved.status();
  if (!*saved) return std::nullopt;
  return ReadGroupCheckpoint(header->group(), sections, header_section,
                             values_section, wanted);
}

template <typename Checkpoint, typename Live>
absl::StatusOr<std::optional<Checkpoint>> SnapshotGroupOptimizer(
    bool created, const absl::Status& damage, Live live,
    const std::optional<Checkpoint>& restored,
    absl::FunctionRef<absl::Status()> while_stopped) {
  std::optional<Checkpoint> saved;
  if (created) {
    if (!damage.ok()) return damage;
    absl::StatusOr<Checkpoint> now = live();
    if (!now.ok()) return now.status();
    saved = *std::move(now);
  } else if (restored.has_value()) {
    // Re-read for a resume, it is behind the live parameters: saved with
    // them, it would make a checkpoint no step ever reached.
    if (restored->group.parameters_moved_on) {
      return absl::FailedPreconditionError(
          "the group resumes from its last group checkpoint at the next "
          "Create (a rank was replaced); no checkpoint until then");
    }
    absl::StatusOr<Checkpoint> copy = DeepCopy(*restored);
    if (!copy.ok()) return copy.status();
    saved = *std::move(copy);
  }
  absl::Status status = while_stopped();
  if (!status.ok()) return status;
  return saved;
}

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_GROUP_CHECKPOINT_H_
