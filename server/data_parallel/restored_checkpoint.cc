#include "server/data_parallel/restored_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "server/comm/agreement.h"

namespace distopt {
namespace {

// The manifest as one string: each folder as <length>:<path>.
std::string EncodeDirs(const std::vector<std::string>& dirs) {
  std::string encoded;
  for (const std::string& dir : dirs) {
    absl::StrAppend(&encoded, dir.size(), ":", dir);
  }
  return encoded;
}

std::optional<std::vector<std::string>> DecodeDirs(absl::string_view encoded) {
  std::vector<std::string> dirs;
  while (!encoded.empty()) {
    const size_t colon = encoded.find(':');
    size_t length = 0;
    if (colon == absl::string_view::npos ||
        !absl::SimpleAtoi(encoded.substr(0, colon), &length) ||
        length > encoded.size() - colon - 1) {
      return std::nullopt;
    }
    dirs.emplace_back(encoded.substr(colon + 1, length));
    encoded.remove_prefix(colon + 1 + length);
  }
  return dirs;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> AllGatherStrings(
    Communicator& communicator, const std::string& mine) {
  const int size = communicator.size();
  std::vector<float> lengths(4 * size);
  absl::Status status = communicator.AllGather(EncodeAsFloats(mine.size()),
                                               absl::MakeSpan(lengths));
  if (!status.ok()) return status;
  size_t longest = 0;
  for (int r = 0; r < size; ++r) {
    longest = std::max<size_t>(longest, DecodeFromFloats(&lengths[4 * r]));
  }
  if (longest == 0) return std::vector<std::string>(size);
  std::string blocks(longest * size, '\0');
  blocks.replace(longest * communicator.rank(), mine.size(), mine);
  const std::vector<size_t> counts(size, longest);
  status = communicator.AllGatherBlocks(absl::MakeSpan(blocks), counts);
  if (!status.ok()) return status;
  std::vector<std::string> all;
  for (int r = 0; r < size; ++r) {
    all.push_back(
        blocks.substr(longest * r, DecodeFromFloats(&lengths[4 * r])));
  }
  return all;
}

absl::StatusOr<GroupResume> AgreeOnRestoredState(
    Communicator& communicator,
    const std::optional<RestoredGroupOptimizer>& restored,
    const std::string& creating, absl::string_view what,
    absl::string_view create_call) {
  const int size = communicator.size();
  absl::Status same;
  if (restored.has_value() && (restored->optimizer != creating ||
                               (restored->world_size == size &&
                                restored->rank != communicator.rank()))) {
    same = absl::FailedPreconditionError(absl::StrCat(
        what, ": the checkpoint holds rank ", restored->rank, " of ",
        restored->world_size, "'s ", what, " optimizer (", restored->optimizer,
        "); expected ", create_call,
        " to make the same one, on the same rank in a group of that size "
        "(here: rank ",
        communicator.rank(), " of ", size, ", ", creating,
        ") or in a group of another size (which reshards it), or a daemon "
        "started on an empty --checkpoint_dir"));
  }
  absl::Status agreed = AgreeOnEveryRank(
      communicator, same, absl::StrCat("the ", what, " of the checkpoints"),
      "nothing was created");
  if (!agreed.ok()) return agreed;
  // Every rank's restored group step + 1 (0: none), the world size and the
  // rank it was saved at, and its run.
  std::vector<float> mine;
  for (uint64_t value :
       {restored.has_value() ? static_cast<uint64_t>(restored->step) + 1 : 0,
        restored.has_value() ? static_cast<uint64_t>(restored->world_size) : 0,
        restored.has_value() ? static_cast<uint64_t>(restored->rank) : 0,
        restored.has_value() ? restored->run : 0}) {
    const std::vector<float> encoded = EncodeAsFloats(value);
    mine.insert(mine.end(), encoded.begin(), encoded.end());
  }
  std::vector<float> all(mine.size() * size);
  absl::Status gathered = communicator.AllGather(mine, absl::MakeSpan(all));
  if (!gathered.ok()) return gathered;
  auto field = [&](int r, int k) {
    return DecodeFromFloats(&all[mine.size() * r + 4 * k]);
  };
  GroupResume resume;
  int source = -1;
  for (int r = 0; r < size && source < 0; ++r) {
    if (field(r, 0) != 0) source = r;
  }
  if (source < 0) return resume;  // Fresh everywhere.
  // The ranks that restored one agree on its step and world size; at the
  // world size it was saved at, every rank restored its own.
  bool differ = false;
  std::vector<std::string> each;
  for (int r = 0; r < size; ++r) {
    const uint64_t at = field(r, 0);
    differ = differ ||
             (at == 0 && field(source, 1) == static_cast<uint64_t>(size)) ||
             (at != 0 &&
              (at != field(source, 0) || field(r, 1) != field(source, 1) ||
               field(r, 3) != field(source, 3)));
    each.push_back(at == 0 ? absl::StrCat("rank ", r, ": none")
                           : absl::StrCat("rank ", r, ": group step ", at - 1,
                                          " of world size ", field(r, 1)));
  }
  bool every_rank_at_this_size = true;
  for (int r = 0; r < size; ++r) {
    every_rank_at_this_size = every_rank_at_this_size && field(r, 0) != 0 &&
                              field(r, 1) == static_cast<uint64_t>(size);
  }
  if (differ && every_rank_at_this_size) {
    // A save not every rank finished: the newest step (of one run) every
    // rank keeps.
    std::vector<std::string> keys;
    for (const GroupStepKey& key : restored->held) {
      keys.push_back(absl::StrCat(key.run, ":", key.step));
    }
    absl::StatusOr<std::vector<std::string>> held =
        AllGatherStrings(communicator, absl::StrJoin(keys, ","));
    if (!held.ok()) return held.status();
    std::set<GroupStepKey> common;
    for (int r = 0; r < size; ++r) {
      std::set<GroupStepKey> keeps;
      std::vector<std::string> steps;
      for (absl::string_view text :
           absl::StrSplit((*held)[r], ',', absl::SkipEmpty())) {
        const std::pair<std::string, std::string> parts =
            absl::StrSplit(text, ':');
        GroupStepKey key;
        if (!absl::SimpleAtoi(parts.first, &key.run) ||
            !absl::SimpleAtoi(parts.second, &key.step)) {
          continue;
        }
        steps.push_back(absl::StrCat(key.step));
        if (r == 0 || common.count(key) > 0) keeps.insert(key);
      }
      common = std::move(keeps);
      absl::StrAppend(&each[r], " (keeps ",
                      steps.empty() ? "none" : absl::StrJoin(steps, ", "), ")");
    }
    if (!common.empty()) {
      resume.restored = true;
      resume.step = common.rbegin()->step;
      resume.run = common.rbegin()->run;
      resume.saved_world_size = size;
      return resume;
    }
  }
  if (differ) {
    return absl::FailedPreconditionError(absl::StrCat(
        what,
        ": the ranks restored different group steps from their "
        "checkpoints (",
        absl::StrJoin(each, ", "),
        "); expected the same step of one run of the group on every rank "
        "that restored one (and on every rank, at the world size it was "
        "saved at), or one that every rank keeps: restart every rank from a "
        "checkpoint of the "
        "same step, or all from empty folders; nothing was created"));
  }
  resume.restored = true;
  resume.run = field(source, 3);
  resume.step = static_cast<int64_t>(field(source, 0) - 1);
  resume.saved_world_size = static_cast<int>(field(source, 1));
  resume.source_rank = source;
  resume.source_saved_rank = static_cast<int>(field(source, 2));
  if (!resume.Reshard(size)) return resume;
  // The source's manifest reaches every rank.
  absl::StatusOr<std::vector<std::string>> manifests = AllGatherStrings(
      communicator,
      communicator.rank() == source ? EncodeDirs(restored->rank_dirs) : "");
  if (!manifests.ok()) return manifests.status();
  std::optional<std::vector<std::string>> dirs =
      DecodeDirs((*manifests)[source]);
  if (!dirs.has_value() ||
      dirs->size() != static_cast<size_t>(resume.saved_world_size)) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": rank ", source, "'s checkpoint (group step ", resume.step,
        " of world size ", resume.saved_world_size,
        ") names no folder for every rank that saved it; expected a "
        "checkpoint whose ranks all ran with --checkpoint_dir to resume at "
        "world size ",
        size, "; nothing was created"));
  }
  resume.rank_dirs = *std::move(dirs);
  return resume;
}

namespace {

// Visits the whole checkpoints in `dir`, newest first, until `found`
// returns true; false when none did. `skipped` gets why the damaged ones
// were passed over. A live daemon's save may rotate the folders while they
// are visited (one renamed between the listing and its reading is missed):
// with `again`, a visit that found nothing is made once more, after the
// rotation.
absl::StatusOr<bool> FindInCheckpoints(
    const std::string& dir,
    absl::FunctionRef<absl::StatusOr<bool>(const CheckpointSections&)> found,
    std::vector<std::string>* skipped, bool again = true) {
  bool any = false;
  for (int attempt = 0; attempt < (again ? 2 : 1) && !any; ++attempt) {
    if (attempt > 0) {
      absl::SleepFor(absl::Milliseconds(200));
      skipped->clear();
    }
    absl::Status status = VisitCheckpoints(
        dir,
        [&](const std::string&,
            const CheckpointSections& sections) -> absl::StatusOr<bool> {
          absl::StatusOr<bool> held = found(sections);
          if (held.ok()) any = *held;
          return held;
        },
        skipped);
    if (!status.ok()) return status;
  }
  return any;
}

std::string Skipped(const std::vector<std::string>& skipped) {
  return skipped.empty()
             ? ""
             : absl::StrCat(" (", absl::StrJoin(skipped, "; "), ")");
}

// This rank's own checkpoint of the group step agreed on, from `dir`: its
// state, and the values saved there of every parameter of `groups`, in
// order.
absl::StatusOr<std::pair<OptimizerStateDict, std::vector<Tensor>>>
ReadOlderGroupStep(const std::string& dir, const GroupResume& resume, int rank,
                   int world_size, absl::string_view what,
                   const std::vector<NamedGroupSpec>& names,
                   const std::vector<ParamGroup>& groups,
                   GroupCheckpointReader read) {
  std::pair<OptimizerStateDict, std::vector<Tensor>> older;
  std::vector<std::string> skipped;
  absl::StatusOr<bool> found = FindInCheckpoints(
      dir,
      [&](const CheckpointSections& sections) -> absl::StatusOr<bool> {
        absl::StatusOr<std::optional<GroupCheckpoint>> state =
            read(sections, [&](const checkpoint::SavedGroupOptimizer& h) {
              return resume.Holds(h, rank);
            });
        if (!state.ok()) return state.status();
        if (!state->has_value()) return false;
        older.first = std::move((*state)->state);
        older.second.clear();
        for (size_t g = 0; g < groups.size(); ++g) {
          for (size_t i = 0; i < groups[g].params.size(); ++i) {
            const Tensor& live = *groups[g].params[i];
            absl::StatusOr<Tensor> saved =
                Tensor::AllocateHost(live.dtype(), live.shape());
            if (!saved.ok()) return saved.status();
            absl::Status values = sections.ReadParameterValues(
                names[g].parameter_names[i], *saved);
            if (!values.ok()) return values;
            older.second.push_back(*std::move(saved));
          }
        }
        return true;
      },
      &skipped);
  if (!found.ok() || !*found) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": the ranks agreed on group step ", resume.step,
        ", which every rank keeps, but ", dir,
        " no longer holds a whole checkpoint of it for rank ", rank,
        found.ok() ? "" : absl::StrCat(": ", found.status().message()),
        Skipped(skipped), "; nothing was created"));
  }
  return older;
}

}  // namespace

absl::StatusOr<std::vector<GroupStepKey>> HeldGroupSteps(
    const std::string& dir, int rank, int world_size,
    GroupCheckpointReader read) {
  std::vector<GroupStepKey> steps;
  std::vector<std::string> skipped;
  absl::StatusOr<bool> found = FindInCheckpoints(
      dir,
      [&](const CheckpointSections& sections) -> absl::StatusOr<bool> {
        absl::Status header =
            read(sections, [&](const checkpoint::SavedGroupOptimizer& h) {
              if (h.rank() == rank && h.world_size() == world_size) {
                steps.push_back({h.run_id(), h.step()});
              }
              return false;  // Headers only.
            }).status();
        if (!header.ok()) return header;
        return false;
      },
      &skipped, /*again=*/false);
  if (!found.ok()) return found.status();
  return steps;
}

absl::StatusOr<GroupRun> FormGroupRun(Communicator& communicator,
                                      const std::string& checkpoint_dir) {
  GroupRun run;
  absl::StatusOr<std::vector<std::string>> dirs =
      AllGatherStrings(communicator, checkpoint_dir);
  if (!dirs.ok()) return dirs.status();
  if (std::none_of(dirs->begin(), dirs->end(),
                   [](const std::string& dir) { return dir.empty(); })) {
    run.rank_dirs = *std::move(dirs);
  }
  if (communicator.rank() == 0) {
    std::random_device device;
    run.run_id = (static_cast<uint64_t>(device()) << 32) ^ device() ^
                 static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  }
  std::vector<float> encoded = EncodeAsFloats(run.run_id);
  absl::Status sent = communicator.Broadcast(absl::MakeSpan(encoded), 0);
  if (!sent.ok()) return sent;
  run.run_id = DecodeFromFloats(encoded.data());
  return run;
}

RestoredGroupOptimizer DescribeRestored(const GroupCheckpoint& group,
                                        std::string optimizer,
                                        const std::string& dir,
                                        GroupCheckpointReader read) {
  RestoredGroupOptimizer restored{std::move(optimizer), group.rank,
                                  group.world_size,     group.step,
                                  group.run.rank_dirs,  group.run.run_id};
  absl::StatusOr<std::vector<GroupStepKey>> held =
      HeldGroupSteps(dir, group.rank, group.world_size, read);
  if (held.ok()) {
    restored.held = *std::move(held);
  } else {
    // Only what was restored is known to be there.
    log::Warning("cannot list the group checkpoints",
                 {{"dir", dir}, {"error", held.status().message()}});
    restored.held = {{group.run.run_id, group.step}};
  }
  return restored;
}

absl::StatusOr<OptimizerStateDict> ResumeOwnState(
    Communicator& communicator, const GroupResume& resume,
    const GroupCheckpoint& restored, const std::string& dir,
    absl::string_view what, const std::vector<NamedGroupSpec>& names,
    const std::vector<ParamGroup>& groups, GroupCheckpointReader read,
    bool* changed) {
  absl::StatusOr<std::pair<OptimizerStateDict, std::vector<Tensor>>> older =
      std::pair<OptimizerStateDict, std::vector<Tensor>>();
  const bool fall_back =
      resume.OlderThan(restored.step) || restored.parameters_moved_on;
  if (fall_back) {
    older = ReadOlderGroupStep(dir, resume, communicator.rank(),
                               communicator.size(), what, names, groups, read);
  }
  // Every rank read its own before any parameter changes.
  absl::Status agreed = AgreeOnEveryRank(communicator, older.status(),
                                         "the checkpoints of the group step",
                                         "nothing was created");
  if (!agreed.ok()) return agreed;
  if (!fall_back) return restored.state;
  log::Warning(
      resume.OlderThan(restored.step)
          ? "the ranks' newest checkpoints hold different group steps; "
            "resuming at the newest group step every rank keeps"
          : "resuming from the last group checkpoint, and its parameters",
      {{"optimizer", what},
       {"group_step", resume.step},
       {"restored_step", restored.step}});
  *changed = true;
  size_t k = 0;
  for (const ParamGroup& group : groups) {
    for (Tensor* p : group.params) {
      // The saved values are in host memory; the parameter may be on a GPU.
      absl::StatusOr<std::shared_ptr<Backend>> device = GetBackend(p->device());
      absl::Status copied = device.status();
      if (copied.ok()) {
        copied = (*device)->CopyFromHost(p->data(), older->second[k].data(),
                                         p->byte_size());
      }
      if (!copied.ok()) return copied;
      ++k;
    }
  }
  return std::move(older->first);
}

absl::Status ReadSavedRank(
    const GroupResume& resume, int saved_rank, absl::string_view what,
    absl::FunctionRef<absl::StatusOr<bool>(const CheckpointSections&)> read) {
  const std::string& dir = resume.rank_dirs[saved_rank];
  std::vector<std::string> skipped;
  absl::StatusOr<bool> found = FindInCheckpoints(dir, read, &skipped);
  if (!found.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": reading rank ", saved_rank,
                     "'s checkpoint: ", found.status().message()));
  }
  if (*found) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": ", dir, " holds no whole checkpoint of rank ", saved_rank,
      " of ", resume.saved_world_size, " at group step ", resume.step,
      Skipped(skipped),
      "; expected every rank's folder of the group that saved it, as its "
      "manifest names them, readable from every rank"));
}

absl::Status BroadcastParameters(Communicator& communicator,
                                 const std::vector<ParamGroup>& groups,
                                 int root) {
  for (const ParamGroup& group : groups) {
    for (Tensor* p : group.params) {
      // Through the tensors' communicator: the parameters' device.
      absl::Status sent = communicator.tensors().BroadcastBytes(
          absl::MakeSpan(static_cast<char*>(p->data()), p->byte_size()), root);
      if (!sent.ok()) return sent;
    }
  }
  return absl::OkStatus();
}

}  // namespace distopt
