// ReplacementWatch: whether a rank of the group was replaced since a group
// optimizer (ZeRO, post-local SGD) was made. The optimizer was made with
// the old daemon, whose state died with it: the runner drops it, and its
// calls say why until it is made again (which, with --checkpoint_dir,
// resumes every rank from its last group checkpoint). Not thread-safe: the
// runner's lock guards it.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_REPLACEMENT_WATCH_H_
#define DISTOPT_SERVER_DATA_PARALLEL_REPLACEMENT_WATCH_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/comm/group_membership.h"

namespace distopt {

class ReplacementWatch {
 public:
  // `what` names the optimizer ("zero: the ZeRO optimizer"), `create` the
  // call that makes it ("CreateZero").
  ReplacementWatch(absl::string_view what, absl::string_view create)
      : what_(what), create_(create) {}

  // At a Create that succeeded, with the replacements counted before its
  // collectives (one recorded during them is not overlooked).
  void Created(int64_t replacements_before) {
    seen_ = replacements_before;
    dropped_.clear();
  }

  // True, once, when the group replaced a rank since Created: the caller
  // drops its optimizer.
  bool Replaced(const GroupMembership& membership) {
    const int64_t count = membership.replacement_count();
    if (count == seen_) return false;
    seen_ = count;
    const RankReplacement last = membership.replacements().back();
    dropped_ = absl::StrCat(
        what_, " was dropped when rank ", last.rank, " was replaced (round ",
        last.round, ", now ", last.address, "); expected ", create_,
        " again on every rank (with --checkpoint_dir, it resumes from the "
        "ranks' last group checkpoint)");
    return true;
  }

  // Why there is no optimizer: `otherwise`, unless it was dropped.
  absl::Status NotCreated(absl::Status otherwise) const {
    if (dropped_.empty()) return otherwise;
    return absl::FailedPreconditionError(dropped_);
  }

 private:
  const std::string what_;
  const std::string create_;
  int64_t seen_ = 0;
  std::string dropped_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_REPLACEMENT_WATCH_H_
