// RankResources: the parts of a daemon that its data-parallel optimizers
// (ZeRO, post-local SGD) use, and the lookups both make before a call: the
// daemon's group and the autograd context a step takes its gradients from.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_RANK_RESOURCES_H_
#define DISTOPT_SERVER_DATA_PARALLEL_RANK_RESOURCES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/autograd/context.h"
#include "server/autograd/context_table.h"
#include "server/comm/group_membership.h"
#include "server/optim/registry.h"
#include "server/params/parameter_store.h"

namespace distopt {

// All outlive the optimizers that use them.
struct RankResources {
  ParameterStore* parameters = nullptr;
  ContextTable* contexts = nullptr;
  const OptimizerRegistry* kinds = nullptr;
  // Null until (unless) the daemon is in a data-parallel group.
  const std::atomic<GroupMembership*>* membership = nullptr;
  // The daemon's --checkpoint_dir, absolute (empty: none): the group
  // checkpoints' manifests name every rank's.
  std::string checkpoint_dir;

  // The daemon's group; FAILED_PRECONDITION when it is in none.
  absl::StatusOr<GroupMembership*> Group() const;
  // The autograd context a step takes its gradients from: INVALID_ARGUMENT
  // for a malformed id, NOT_FOUND for an unknown one.
  // PERMISSION_DENIED for one another client identity made.
  absl::StatusOr<std::shared_ptr<AutogradContext>> Context(
      uint64_t context_id, absl::string_view caller) const;
  // This daemon's rank; 0 outside a group.
  int rank() const;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_RANK_RESOURCES_H_
