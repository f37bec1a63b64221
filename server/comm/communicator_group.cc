#include "server/comm/communicator_group.h"

#include "absl/strings/str_cat.h"

namespace distopt {

absl::StatusOr<Communicator*> GlooCommunicatorGroup::Subgroup(int size) {
  const int world = global_->size();
  if (size < 1 || world % size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("subgroup size: ", size,
                     "; expected a divisor of the world size ", world));
  }
  if (size == world) return global_;
  auto it = subgroups_.find(size);
  if (it != subgroups_.end()) return it->second.get();
  SubgroupOptions subgroup;
  subgroup.subgroup_size = size;
  absl::StatusOr<std::unique_ptr<Communicator>> made =
      CreateGlooSubgroup(options_, subgroup, store_);
  if (made.ok() && pair_ != nullptr) {
    // Named by its size and block, so that every block's is its own.
    made = pair_(*std::move(made),
                 absl::StrCat("sub", size, "/", global_->rank() / size));
  }
  if (!made.ok()) return made.status();
  Communicator* result = made->get();
  subgroups_[size] = *std::move(made);
  return result;
}

void GlooCommunicatorGroup::SetTimeout(absl::Duration timeout) {
  options_.timeout = timeout;  // Subgroups made later connect within it.
  global_->SetTimeout(timeout);
  for (auto& [size, subgroup] : subgroups_) subgroup->SetTimeout(timeout);
}

}  // namespace distopt
