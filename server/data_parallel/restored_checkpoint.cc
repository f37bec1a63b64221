#include "server/data_parallel/restored_checkpoint.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/comm/agreement.h"

namespace distopt {

absl::Status AgreeOnRestoredState(
    Communicator& communicator,
    const std::optional<RestoredGroupOptimizer>& restored,
    const std::string& creating, absl::string_view what,
    absl::string_view create_call) {
  absl::Status same;
  if (restored.has_value() && (restored->optimizer != creating ||
                               restored->rank != communicator.rank() ||
                               restored->world_size != communicator.size())) {
    same = absl::FailedPreconditionError(absl::StrCat(
        what, ": the checkpoint holds rank ", restored->rank, " of ",
        restored->world_size, "'s ", what, " optimizer (", restored->optimizer,
        "); expected ", create_call,
        " to make the same one on the same rank (here: rank ",
        communicator.rank(), " of ", communicator.size(), ", ", creating,
        "), or a daemon started on an empty --checkpoint_dir"));
  }
  absl::Status agreed = AgreeOnEveryRank(
      communicator, same, absl::StrCat("the ", what, " of the checkpoints"),
      "nothing was created");
  if (!agreed.ok()) return agreed;
  const std::optional<int64_t> step =
      restored.has_value() ? std::optional<int64_t>(restored->step)
                           : std::nullopt;
  // Every rank's restored group step (0: none; else the step + 1).
  std::vector<float> steps(4 * communicator.size());
  absl::Status gathered = communicator.AllGather(
      EncodeAsFloats(step.has_value() ? static_cast<uint64_t>(*step) + 1 : 0),
      absl::MakeSpan(steps));
  if (!gathered.ok()) return gathered;
  std::vector<std::string> each;
  bool differ = false;
  for (int r = 0; r < communicator.size(); ++r) {
    const uint64_t at = DecodeFromFloats(&steps[4 * r]);
    differ = differ || at != DecodeFromFloats(&steps[0]);
    each.push_back(at == 0 ? absl::StrCat("rank ", r, ": none")
                           : absl::StrCat("rank ", r, ": group step ", at - 1));
  }
  if (differ) {
    return absl::FailedPreconditionError(absl::StrCat(
        what,
        ": the ranks restored different group steps from their "
        "checkpoints (",
        absl::StrJoin(each, ", "),
        "); expected the same on every rank: restart every rank from a "
        "checkpoint of the same step, or all from empty folders; nothing was "
        "created"));
  }
  return absl::OkStatus();
}

}  // namespace distopt
