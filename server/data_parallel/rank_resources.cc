#include "server/data_parallel/rank_resources.h"

namespace distopt {

absl::StatusOr<GroupMembership*> RankResources::Group() const {
  GroupMembership* group = membership->load();
  if (group == nullptr) {
    return absl::FailedPreconditionError(
        "group: this daemon is not in a data-parallel group; expected "
        "--world_size > 1 with --rendezvous or --peers");
  }
  return group;
}

absl::StatusOr<std::shared_ptr<AutogradContext>> RankResources::Context(
    uint64_t context_id, absl::string_view caller) const {
  return contexts->Find(context_id, caller);
}

int RankResources::rank() const {
  GroupMembership* group = membership->load();
  return group == nullptr ? 0 : group->rank();
}

}  // namespace distopt
