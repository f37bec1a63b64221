#include "server/zero/zero_runner.h"

#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/autograd/parameter_locks.h"

namespace distopt {
absl::StatusOr<GroupMembership*> ZeroRunner::Membership() const {
  GroupMembership* membership = membership_->load();
  if (membership == nullptr) {
    return absl::FailedPreconditionError(
        "group: this daemon is not in a data-parallel group; expected "
        "--world_size > 1 with --rendezvous or --peers");
  }
  return membership;
}

ZeroStatus ZeroRunner::StatusLocked() const {
  ZeroStatus status;
  const ZeroPartition& partition = optimizer_->partition();
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      status.owners.emplace_back(groups_[g][i]->name(), partition.owner[g][i]);
      status.parameter_bytes += groups_[g][i]->byte_size();
    }
  }
  status.loads = partition.load;
  status.state_bytes = optimizer_->state_bytes();
  status.steps = steps_;
  status.gradient_bytes = status.parameter_bytes;
  return status;
}

absl::StatusOr<ZeroStatus> ZeroRunner::Create(const ZeroSpec& spec) {
  absl::StatusOr<GroupMembership*> membership = Membership();
  if (!membership.ok()) return membership.status();
  absl::StatusOr<const OptimizerKind*> kind = kinds_->Find(spec.kind);
  if (!kind.ok()) return kind.status();
  absl::MutexLock lock(&mutex_);
  if (optimizer_ != nullptr) {
    return absl::AlreadyExistsError(
        "zero: this daemon already has a ZeRO optimizer");
  }
  std::vector<std::vector<std::shared_ptr<Parameter>>> groups;
  std::vector<std::shared_ptr<Parameter>> all;
  absl::flat_hash_set<uint64_t> seen;
  for (size_t g = 0; g < spec.groups.size(); ++g) {
    groups.emplace_back();
    for (size_t i = 0; i < spec.groups[g].parameter_names.size(); ++i) {
      absl::StatusOr<std::shared_ptr<Parameter>> parameter = parameters_->Find(
          ParameterKey::ByName(spec.groups[g].parameter_names[i]));
      if (!parameter.ok()) {
        return absl::NotFoundError(absl::StrCat(
            "groups[", g, "].parameter_names[", i, "]: no parameter named \"",
            spec.groups[g].parameter_names[i], "\""));
      }
      // A parameter named twice would be locked twice below.
      if (!seen.insert((*parameter)->id()).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "groups[", g, "].parameter_names[", i, "]: \"",
            spec.groups[g].parameter_names[i],
            "\" is named more than once; expected each parameter once"));
      }
      all.push_back(*parameter);
      groups.back().push_back(*std::move(parameter));
    }
  }
  ExclusiveParameterLocks locks(all);
  std::vector<ZeroParamGroup> zero_groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    ZeroParamGroup group;
    group.hyperparameters = spec.groups[g].hyperparameters;
    for (const auto& parameter : groups[g]) {
      parameter->mutex().AssertHeld();
      group.params.push_back(&parameter->values_locked());
    }
    zero_groups.push_back(std::move(group));
  }
  absl::StatusOr<std::unique_ptr<ZeroOptimizer>> optimizer;
  absl::Status ran = (*membership)->Run(spec.timeout, [&](Communicator& c) {
    optimizer = ZeroOptimizer::Create(&c, *kind, spec.kind, zero_groups);
    return optimizer.status();
  });
  if (!ran.ok()) return ran;
  spec_ = spec;
  groups_ = std::move(groups);
  optimizer_ = *std::move(optimizer);
  return StatusLocked();
}

absl::Status ZeroRunner::Step(uint64_t context_id) {
  absl::Status valid = ValidateContextId(context_id, "context_id");
  if (!valid.ok()) return valid;
  absl::StatusOr<GroupMembership*> membership = Membership();
  if (!membership.ok()) return membership.status();
  absl::StatusOr<std::shared_ptr<AutogradContext>> context =
      contexts_->Find(context_id);
  if (!context.ok()) return context.status();
  absl::MutexLock lock(&mutex_);
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError(
        "zero: no ZeRO optimizer on this daemon; expected CreateZero first");
  }
  std::vector<std::vector<std::optional<Tensor>>> gradients(groups_.size());
  std::vector<std::vector<const Tensor*>> grads(groups_.size());
  std::vector<std::shared_ptr<Parameter>> all;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& parameter : groups_[g]) {
      gradients[g].push_back((*context)->Gradient(parameter->id()));
      all.push_back(parameter);
    }
    for (const auto& gradient : gradients[g]) {
      grads[g].push_back(gradient.has_value() ? &*gradient : nullptr);
    }
  }
  ExclusiveParameterLocks locks(all);
  absl::Status status = (*membership)->Run(spec_.timeout, [&](Communicator&) {
    return optimizer_->Step(grads);
  });
  if (!status.ok()) return status;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      if (grads[g][i] == nullptr) continue;
      groups_[g][i]->mutex().AssertHeld();
      groups_[g][i]->BumpVersionLocked();
    }
  }
  ++steps_;
  return absl::OkStatus();
}

absl::StatusOr<ZeroStatus> ZeroRunner::Get() const {
  absl::MutexLock lock(&mutex_);
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError(
        "zero: no ZeRO optimizer on this daemon; expected CreateZero first");
  }
  return StatusLocked();
}

}  // namespace distopt
