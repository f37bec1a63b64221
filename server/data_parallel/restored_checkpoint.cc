#include "server/data_parallel/restored_checkpoint.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/comm/agreement.h"

namespace distopt {

absl::Status AgreeOnRestoredState(Communicator& communicator,
                                  const absl::Status& same,
                                  std::optional<int64_t> step,
                                  absl::string_view what) {
  absl::Status agreed = AgreeOnEveryRank(
      communicator, same, absl::StrCat("the ", what, " of the checkpoints"),
      "nothing was created");
  if (!agreed.ok()) return agreed;
  // Every rank's restored group step (0: none; else the step + 1).
  std::vector<float> steps(4 * communicator.size());
  absl::Status gathered = communicator.AllGather(
      EncodeAsFloats(step.has_value() ? static_cast<uint64_t>(*step) + 1 : 0),
      absl::MakeSpan(steps));
  if (!gathered.ok()) return gathered;
  std::vector<std::string> each;
  bool differ = false;
  for (int r = 0; r < communicator.size(); ++r) {
    const uint64_t restored = DecodeFromFloats(&steps[4 * r]);
    differ = differ || restored != DecodeFromFloats(&steps[0]);
    each.push_back(restored == 0 ? absl::StrCat("rank ", r, ": none")
                                 : absl::StrCat("rank ", r, ": group step ",
                                                restored - 1));
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
