// What ZeRO and post-local SGD share when a group resumes from its ranks'
// checkpoints: the collective check that every rank restored the state of
// the same optimizer at the same group step, and, for a group that resumes
// at another world size than it saved at, the manifest every rank's
// checkpoint carries (each rank's --checkpoint_dir when the group formed),
// through which a rank reads the other ranks' files.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_RESTORED_CHECKPOINT_H_
#define DISTOPT_SERVER_DATA_PARALLEL_RESTORED_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/log.h"
#include "server/comm/communicator.h"
#include "server/data_parallel/group_checkpoint.h"
#include "server/data_parallel/named_groups.h"
#include "server/data_parallel/param_groups.h"
#include "server/params/checkpoint.h"

namespace distopt {

// Where a group checkpoint is in the group's history: the run (one
// creation of the group's optimizer) and the group step within it.
struct GroupStepKey {
  uint64_t run = 0;
  int64_t step = 0;
  bool operator==(const GroupStepKey& other) const {
    return run == other.run && step == other.step;
  }
  bool operator<(const GroupStepKey& other) const {
    return step != other.step ? step < other.step : run < other.run;
  }
};

// What a rank restored of a group optimizer from its checkpoint.
struct RestoredGroupOptimizer {
  std::string optimizer;  // Its kind, groups and options, described.
  int rank = 0;
  int world_size = 0;
  int64_t step = 0;  // The group's.
  // The manifest: every rank's checkpoint folder, by rank (empty in
  // checkpoints saved before there was one).
  std::vector<std::string> rank_dirs;
  uint64_t run = 0;  // The run the checkpoint belongs to.
  // The runs and group steps of this optimizer, at this rank and world
  // size, in all the checkpoints the rank keeps (see HeldGroupSteps).
  std::vector<GroupStepKey> held;
};

// How the group optimizer being created starts.
struct GroupResume {
  bool restored = false;  // False: fresh, no rank restored one.
  int64_t step = 0;       // The group's, when restored.
  uint64_t run = 0;       // The run it belongs to.
  int saved_world_size = 0;
  // The lowest rank that restored the checkpoint, and the rank it was when
  // the checkpoint was saved: after a reshard every rank starts from its
  // parameters.
  int source_rank = 0;
  int source_saved_rank = 0;
  std::vector<std::string> rank_dirs;  // The manifest, on every rank.

  // A save that not every rank finished (a crash between the ranks'
  // writes) left the ranks' newest checkpoints at different group steps:
  // they agreed on the newest step every rank still keeps, and a rank whose
  // restored step is another reads that older checkpoint of its own.
  bool OlderThan(int64_t restored_step) const {
    return restored && step != restored_step;
  }
  // Whether `saved` is saved rank `rank`'s checkpoint of this step.
  bool Holds(const checkpoint::SavedGroupOptimizer& saved, int rank) const {
    return saved.rank() == rank && saved.world_size() == saved_world_size &&
           saved.step() == step && saved.run_id() == run;
  }
  // Each rank restored its own state: same world size, same ranks.
  bool OwnState(int world_size) const {
    return restored && saved_world_size == world_size;
  }
  // The group resumes at another world size: its state is read from the
  // files of the ranks that saved it.
  bool Reshard(int world_size) const {
    return restored && saved_world_size != world_size;
  }
};

// Collective, when the group optimizer described by `creating` is created
// (by `create_call`) on ranks that may have restored one (`restored`;
// nullopt: none). OK when every rank restored the same optimizer at its own
// rank, at the same group step (or none did), or each keeps a checkpoint of
// one step (the newest such is agreed on: see GroupResume::OlderThan); or
// when the ranks that restored one agree on its step and world size and
// that is not this group's world size (a reshard: ranks without one take
// part). Else FAILED_PRECONDITION on every rank: what this rank's
// checkpoint holds, the rank that refused, or every rank's steps and world
// size. Nothing is created then.
absl::StatusOr<GroupResume> AgreeOnRestoredState(
    Communicator& communicator,
    const std::optional<RestoredGroupOptimizer>& restored,
    const std::string& creating, absl::string_view what,
    absl::string_view create_call);

// Reads a group optimizer's checkpoint from its sections, as
// ReadZeroCheckpoint and ReadLocalSgdCheckpoint do, keeping only what
// `wanted` wants (whose values alone are read): its group part.
using GroupCheckpointReader =
    absl::FunctionRef<absl::StatusOr<std::optional<GroupCheckpoint>>(
        const CheckpointSections&, const GroupCheckpointFilter& wanted)>;

// The runs and group steps (newest first) of the checkpoints kept in `dir`
// that hold the optimizer `read` reads at `rank` of `world_size`; only
// headers are read. Damaged checkpoints are left out.
absl::StatusOr<std::vector<GroupStepKey>> HeldGroupSteps(
    const std::string& dir, int rank, int world_size,
    GroupCheckpointReader read);

// What a rank's restored checkpoint `group` of the optimizer described as
// `optimizer` tells AgreeOnRestoredState, with the runs and steps of the
// checkpoints `dir` keeps (read by `read`).
RestoredGroupOptimizer DescribeRestored(const GroupCheckpoint& group,
                                        std::string optimizer,
                                        const std::string& dir,
                                        GroupCheckpointReader read);

// Collective, when the group's optimizer is created: the new run (rank 0
// draws its id) and the manifest of every rank's `checkpoint_dir` (empty
// unless every rank has one).
absl::StatusOr<GroupRun> FormGroupRun(Communicator& communicator,
                                      const std::string& checkpoint_dir);

// The group part of a checkpoint of the group optimizer `Read` reads
// (ReadZeroCheckpoint, ReadLocalSgdCheckpoint), as a GroupCheckpointReader.
template <typename Checkpoint,
          absl::StatusOr<std::optional<Checkpoint>> (*Read)(
              const CheckpointSections&, const GroupCheckpointFilter&)>
absl::StatusOr<std::optional<GroupCheckpoint>> ReadGroupPart(
    const CheckpointSections& sections, const GroupCheckpointFilter& wanted) {
  absl::StatusOr<std::optional<Checkpoint>> read = Read(sections, wanted);
  if (!read.ok()) return read.status();
  if (!read->has_value()) return std::nullopt;
  return std::move((*read)->group);
}

// The newest whole checkpoint in `dir` holding the group optimizer `Read`
// reads (ReadZeroCheckpoint, ReadLocalSgdCheckpoint), re-read by a live rank
// whose group resumes from its last group checkpoint (a peer was
// replaced): marked parameters_moved_on. nullopt when none holds one, or
// `dir` is empty (the daemon keeps no checkpoints), or cannot be read (said
// in the log).
template <typename Checkpoint,
          absl::StatusOr<std::optional<Checkpoint>> (*Read)(
              const CheckpointSections&, const GroupCheckpointFilter&)>
std::optional<Checkpoint> LastGroupCheckpoint(const std::string& dir) {
  std::optional<Checkpoint> newest;
  if (dir.empty()) return newest;
  std::vector<std::string> skipped;
  absl::Status visited = VisitCheckpoints(
      dir,
      [&](const std::string&,
          const CheckpointSections& sections) -> absl::StatusOr<bool> {
        absl::StatusOr<std::optional<Checkpoint>> read =
            Read(sections, nullptr);
        if (!read.ok()) return read.status();
        if (!read->has_value()) return false;
        newest = *std::move(read);
        return true;
      },
      &skipped);
  if (!visited.ok()) {
    log::Warning("no group checkpoint to resume from",
                 {{"checkpoint_dir", dir}, {"error", visited.message()}});
    return std::nullopt;
  }
  if (newest.has_value()) newest->group.parameters_moved_on = true;
  return newest;
}

// Collective, for a group that resumes at the world size it was saved at
// (GroupResume::OwnState): this rank's state to load, the `restored` one's,
// or, when the ranks agreed on an older group step (GroupResume::OlderThan),
// that of its own checkpoint of that step in `dir`, whose saved values then
// replace those of every parameter of `groups` (named by `names`) once
// every rank read its own (and `*changed` is set). FAILED_PRECONDITION on
// every rank, with nothing changed, when a rank's older checkpoint is no
// longer there or not whole.
absl::StatusOr<OptimizerStateDict> ResumeOwnState(
    Communicator& communicator, const GroupResume& resume,
    const GroupCheckpoint& restored, const std::string& dir,
    absl::string_view what, const std::vector<NamedGroupSpec>& names,
    const std::vector<ParamGroup>& groups, GroupCheckpointReader read,
    bool* changed);

// Collective: every rank's `mine`, by rank.
absl::StatusOr<std::vector<std::string>> AllGatherStrings(
    Communicator& communicator, const std::string& mine);

// Reads saved rank `saved_rank`'s checkpoint at the group step of `resume`
// from the folder the manifest names: `read` gets each whole checkpoint
// there, newest first, and returns true once it held that rank's state of
// that step. FAILED_PRECONDITION naming the folder, the rank and the step
// when none did (with why the damaged ones were skipped).
absl::Status ReadSavedRank(
    const GroupResume& resume, int saved_rank, absl::string_view what,
    absl::FunctionRef<absl::StatusOr<bool>(const CheckpointSections&)> read);

// Collective: every rank's `groups` take rank `root`'s values (a group
// that resumes at another world size starts from one model).
absl::Status BroadcastParameters(Communicator& communicator,
                                 const std::vector<ParamGroup>& groups,
                                 int root);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_RESTORED_CHECKPOINT_H_
