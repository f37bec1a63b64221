#include "server/localsgd/local_sgd_runner.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "server/autograd/parameter_locks.h"

namespace distopt {
namespace {

void Log(const std::vector<std::string>& warnings) {
  for (const std::string& warning : warnings) {
    std::fprintf(stderr, "distopt_worker: warning: post-local SGD: %s\n",
                 warning.c_str());
  }
}

}  // namespace

absl::Status LocalSgdRunner::CheckCreatedLocked() const {
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError(
        "post-local SGD: none on this daemon; expected CreatePostLocalSgd "
        "first");
  }
  return absl::OkStatus();
}

LocalSgdStatus LocalSgdRunner::StatusLocked() const {
  LocalSgdStatus status;
  status.kind = spec_.kind;
  status.world_size = optimizer_->world_size();
  if (GroupMembership* membership = daemon_.membership->load()) {
    status.rank = membership->rank();
  }
  status.step = optimizer_->step();
  status.next_averaging = optimizer_->averager().NextAveraging(status.step);
  const PostLocalSgdOptions& options = optimizer_->options();
  status.next_gradient_group_size =
      status.step < options.start_localsgd_iter ? status.world_size
      : options.post_local_gradient_allreduce   ? options.subgroup_size
                                                : 0;
  status.warnings = warnings_;
  return status;
}

absl::StatusOr<LocalSgdStatus> LocalSgdRunner::Create(LocalSgdSpec spec) {
  absl::StatusOr<GroupMembership*> membership = daemon_.Group();
  if (!membership.ok()) return membership.status();
  absl::StatusOr<const OptimizerKind*> kind = daemon_.kinds->Find(spec.kind);
  if (!kind.ok()) return kind.status();
  absl::MutexLock lock(&mutex_);
  if (optimizer_ != nullptr) {
    return absl::AlreadyExistsError(
        "post-local SGD: this daemon already has one");
  }
  if (spec.options.post_local_gradient_allreduce &&
      spec.options.subgroup_size == 0) {
    absl::StatusOr<int> per_host = (*membership)->RanksOnThisHost(spec.timeout);
    if (!per_host.ok()) {
      return absl::Status(per_host.status().code(),
                          absl::StrCat("subgroup_size: 0 (the ranks of this "
                                       "host): ",
                                       per_host.status().message()));
    }
    spec.options.subgroup_size = *per_host;
  }
  absl::StatusOr<ParameterGroups> groups =
      FindNamedGroups(*daemon_.parameters, spec.groups, 0);
  if (!groups.ok()) return groups.status();
  const std::vector<std::shared_ptr<Parameter>> all = Flatten(*groups);
  ExclusiveParameterLocks locks(all);
  std::vector<ZeroParamGroup> tensor_groups;
  for (size_t g = 0; g < groups->size(); ++g) {
    tensor_groups.push_back(ToTensorGroup(spec.groups[g], (*groups)[g]));
  }
  std::vector<std::string> warnings;
  absl::StatusOr<std::unique_ptr<PostLocalSgdOptimizer>> optimizer;
  absl::Status ran =
      (*membership)->RunInGroup(spec.timeout, [&](CommunicatorGroup& group) {
        optimizer = PostLocalSgdOptimizer::Create(
            group, *kind, spec.kind, tensor_groups, spec.options, &warnings);
        return optimizer.status();
      });
  if (!ran.ok()) return ran;
  Log(warnings);
  spec_ = std::move(spec);
  groups_ = *std::move(groups);
  optimizer_ = *std::move(optimizer);
  warnings_ = std::move(warnings);
  return StatusLocked();
}

absl::StatusOr<int> LocalSgdRunner::Step(uint64_t context_id) {
  absl::StatusOr<GroupMembership*> membership = daemon_.Group();
  if (!membership.ok()) return membership.status();
  absl::StatusOr<std::shared_ptr<AutogradContext>> context =
      daemon_.Context(context_id);
  if (!context.ok()) return context.status();
  absl::MutexLock lock(&mutex_);
  absl::Status created = CheckCreatedLocked();
  if (!created.ok()) return created;
  GroupGradients gradients;
  CollectGradients(**context, groups_, &gradients);
  const std::vector<std::shared_ptr<Parameter>> all = Flatten(groups_);
  ExclusiveParameterLocks locks(all);
  const int averaged =
      optimizer_->averager().GroupSizeAt(optimizer_->step()).value_or(0);
  absl::Status status =
      (*membership)->RunInGroup(spec_.timeout, [&](CommunicatorGroup& group) {
        return optimizer_->Step(group, gradients.pointers);
      });
  if (!status.ok()) return status;
  BumpVersions(all);
  return averaged;
}

absl::StatusOr<LocalSgdStatus> LocalSgdRunner::Get() const {
  absl::MutexLock lock(&mutex_);
  absl::Status created = CheckCreatedLocked();
  if (!created.ok()) return created;
  return StatusLocked();
}

absl::StatusOr<LocalSgdStatus> LocalSgdRunner::SetHyperparameters(
    int group, const absl::flat_hash_map<std::string, HyperValue>& changes) {
  absl::StatusOr<GroupMembership*> membership = daemon_.Group();
  if (!membership.ok()) return membership.status();
  absl::MutexLock lock(&mutex_);
  absl::Status created = CheckCreatedLocked();
  if (!created.ok()) return created;
  absl::Status status =
      (*membership)->RunInGroup(spec_.timeout, [&](CommunicatorGroup& g) {
        return optimizer_->SetHyperparameters(g, group, changes);
      });
  if (!status.ok()) return status;
  return StatusLocked();
}

absl::StatusOr<std::pair<OptimizerStateDict, int64_t>>
LocalSgdRunner::GetStateDict() const {
  absl::MutexLock lock(&mutex_);
  absl::Status created = CheckCreatedLocked();
  if (!created.ok()) return created;
  absl::StatusOr<OptimizerStateDict> dict = optimizer_->StateDict();
  if (!dict.ok()) return dict.status();
  return std::make_pair(*std::move(dict), optimizer_->step());
}

absl::StatusOr<std::vector<std::string>> LocalSgdRunner::LoadStateDict(
    const OptimizerStateDict& state_dict, std::optional<int64_t> step) {
  absl::MutexLock lock(&mutex_);
  absl::Status created = CheckCreatedLocked();
  if (!created.ok()) return created;
  std::vector<std::string> warnings;
  absl::Status loaded = optimizer_->LoadStateDict(state_dict, step, &warnings);
  if (!loaded.ok()) return loaded;
  Log(warnings);
  return warnings;
}

}  // namespace distopt
