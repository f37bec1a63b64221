#include "server/localsgd/local_sgd_runner.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/metrics.h"
#include "server/comm/agreement.h"
#include "server/data_parallel/locked_collective.h"
#include "server/data_parallel/restored_checkpoint.h"
#include "server/optim/step_metrics.h"

namespace distopt {
namespace {

void Log(const std::vector<std::string>& warnings) {
  for (const std::string& warning : warnings) {
    log::Warning("post-local SGD", {{"warning", warning}});
  }
}

// Averaging steps, by the size of the group that averaged (the host's
// ranks, or the whole group, for hierarchical averaging).
prometheus::Counter& Averagings(int group_size) {
  static auto& family = metrics::CounterFamily(
      "distopt_post_local_sgd_averagings_total",
      "Post-local SGD steps that averaged the parameters, by the number of "
      "ranks that averaged");
  return metrics::CounterWith(family, {{"ranks", absl::StrCat(group_size)}});
}

}  // namespace

absl::Status LocalSgdRunner::CheckCreatedLocked() const {
  if (optimizer_ == nullptr) {
    return replacement_.NotCreated(absl::FailedPreconditionError(
        "post-local SGD: none on this daemon; expected CreatePostLocalSgd "
        "first"));
  }
  return absl::OkStatus();
}

absl::Status LocalSgdRunner::CheckCurrentLocked() {
  if (optimizer_ == nullptr) return CheckCreatedLocked();
  absl::StatusOr<GroupMembership*> membership = resources_.Group();
  if (!membership.ok() || !replacement_.Replaced(**membership)) {
    return absl::OkStatus();
  }
  log::Warning(
      "post-local SGD optimizer dropped: a rank of the group was replaced",
      {{"step", optimizer_->step()}});
  optimizer_.reset();
  groups_.clear();
  restored_ = LastGroupCheckpoint<LocalSgdCheckpoint, ReadLocalSgdCheckpoint>(
      resources_.checkpoint_dir);
  return CheckCreatedLocked();
}

LocalSgdInfo LocalSgdRunner::StatusLocked() const {
  LocalSgdInfo status;
  status.kind = spec_.kind;
  status.world_size = optimizer_->world_size();
  status.rank = resources_.rank();
  status.step = optimizer_->step();
  status.next_averaging = optimizer_->averager().NextAveraging(status.step);
  const LocalSgdOptions& options = optimizer_->options();
  status.next_gradient_group_size =
      status.step < options.start_localsgd_iter ? status.world_size
      : options.post_local_gradient_allreduce   ? options.subgroup_size
                                                : 0;
  status.warnings = warnings_;
  status.bucket_bytes = options.bucket_bytes;
  status.damage = optimizer_->damage();
  return status;
}

absl::StatusOr<LocalSgdInfo> LocalSgdRunner::Create(LocalSgdSpec spec) {
  absl::StatusOr<GroupMembership*> membership = resources_.Group();
  if (!membership.ok()) return membership.status();
  absl::StatusOr<const OptimizerKind*> kind = resources_.kinds->Find(spec.kind);
  absl::MutexLock lock(&mutex_);
  if (optimizer_ != nullptr) {
    // A replacement the group has not met yet: met now, by every rank's
    // Create, and the optimizer made before it goes.
    absl::StatusOr<bool> caught_up =
        (*membership)->CatchUpWithReplacements(spec.timeout);
    if (!caught_up.ok()) return caught_up.status();
  }
  CheckCurrentLocked().IgnoreError();  // One made before a replacement goes.
  const int64_t replacements = (*membership)->replacement_count();
  absl::Status refused = kind.status();
  if (refused.ok() && optimizer_ != nullptr) {
    refused =
        absl::AlreadyExistsError("post-local SGD: this daemon already has one");
  }
  absl::StatusOr<ParameterGroups> groups = FindGroupsOnEveryRank(
      **membership, spec.timeout, *resources_.parameters, spec.groups, refused);
  if (!groups.ok()) return groups.status();
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
  std::vector<std::string> warnings;
  absl::StatusOr<std::unique_ptr<LocalSgdOptimizer>> optimizer;
  absl::StatusOr<GroupRun> run;
  absl::Status ran = RunLockedCollective(
      **membership, spec.timeout, *groups,
      [&](CommunicatorGroup& communicators, bool* changed) {
        const std::vector<ParamGroup> tensors =
            ToParamGroups(spec.groups, *groups);
        optimizer = LocalSgdOptimizer::Create(communicators, *kind, spec.kind,
                                              tensors, spec.options, &warnings,
                                              &resources_.parameters->budget());
        if (!optimizer.ok()) return optimizer.status();
        absl::Status resumed =
            ResumeLocked(communicators.global(), spec, tensors, **optimizer,
                         &warnings, changed);
        if (!resumed.ok()) return resumed;
        run = FormGroupRun(communicators.global(), resources_.checkpoint_dir);
        return run.status();
      });
  if (!ran.ok()) return ran;
  restored_.reset();
  run_ = *std::move(run);
  Log(warnings);
  spec_ = std::move(spec);
  step_metrics_ = &StepMetrics::For("post_local_sgd", spec_.kind);
  groups_ = *std::move(groups);
  optimizer_ = *std::move(optimizer);
  replacement_.Created(replacements);
  warnings_ = std::move(warnings);
  PublishLocked();
  return StatusLocked();
}

absl::StatusOr<int> LocalSgdRunner::Step(uint64_t context_id,
                                         absl::string_view caller) {
  absl::StatusOr<GroupMembership*> membership = resources_.Group();
  if (!membership.ok()) return membership.status();
  // An unknown context is refused in the step's first collective, so that
  // the other ranks need not wait for this one until their timeout.
  const absl::StatusOr<std::shared_ptr<AutogradContext>> context =
      resources_.Context(context_id, caller);
  if (hooks_.before != nullptr) hooks_.before();
  const metrics::Stopwatch timer;
  absl::MutexLock lock(&mutex_);
  absl::Status created = CheckCurrentLocked();
  if (!created.ok()) return created;
  const StepMetrics& step_metrics = *step_metrics_;
  if (!optimizer_->damage().ok()) {
    step_metrics.Failed();
    return optimizer_->damage();
  }
  const int averaged =
      optimizer_->averager().GroupSizeAt(optimizer_->step()).value_or(0);
  absl::Status status = RunCollectiveStep(
      **membership, spec_.timeout, context, groups_,
      [&](CommunicatorGroup& communicators,
          const GroupGradientPointers& gradients, const absl::Status& refused) {
        return optimizer_->Step(communicators, gradients, refused);
      },
      [&] { return !optimizer_->damage().ok(); });
  if (!status.ok()) {
    step_metrics.Failed();
    CheckCurrentLocked().IgnoreError();  // Dropped now if replaced.
    PublishLocked();
    return status;
  }
  step_metrics.Applied(timer.Seconds(), 0, 0);
  if (averaged > 0) metrics::Add(Averagings(averaged));
  if (hooks_.after != nullptr) hooks_.after(optimizer_->step());
  PublishLocked();
  return averaged;
}

void LocalSgdRunner::PublishLocked() const {
  absl::Status created = CheckCreatedLocked();
  absl::StatusOr<LocalSgdInfo> now =
      created.ok() ? absl::StatusOr<LocalSgdInfo>(StatusLocked())
                   : absl::StatusOr<LocalSgdInfo>(created);
  absl::MutexLock lock(&published_mutex_);
  published_ = std::move(now);
}

absl::StatusOr<LocalSgdInfo> LocalSgdRunner::Get() const {
  // Never behind a step that waits for a peer (inspection with a short
  // deadline, as distoptctl's, would time out): then the state after the
  // last step.
  if (mutex_.TryLock()) {
    PublishLocked();
    mutex_.Unlock();
  }
  absl::MutexLock lock(&published_mutex_);
  return published_;
}

absl::StatusOr<LocalSgdInfo> LocalSgdRunner::SetHyperparameters(
    int group, const absl::flat_hash_map<std::string, HyperValue>& changes) {
  absl::StatusOr<GroupMembership*> membership = resources_.Group();
  if (!membership.ok()) return membership.status();
  absl::MutexLock lock(&mutex_);
  absl::Status created = CheckCurrentLocked();
  if (!created.ok()) return created;
  absl::Status status =
      (*membership)->RunInGroup(spec_.timeout, [&](CommunicatorGroup& g) {
        return optimizer_->SetHyperparameters(g, group, changes);
      });
  if (!status.ok()) return status;
  PublishLocked();
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
  absl::Status created = CheckCurrentLocked();
  if (!created.ok()) return created;
  std::vector<std::string> warnings;
  absl::Status loaded = optimizer_->LoadStateDict(state_dict, step, &warnings);
  if (!loaded.ok()) return loaded;
  Log(warnings);
  PublishLocked();
  return warnings;
}

namespace {

// An optimizer as a checkpoint's is compared with the one being created.
std::string Describe(const std::string& kind,
                     const std::vector<NamedGroupSpec>& groups,
                     const LocalSgdOptions& o) {
  std::vector<std::string> periods;
  for (const auto& [period, size] : o.averager.periods) {
    periods.push_back(absl::StrCat(period, ":", size));
  }
  return absl::StrCat(
      kind, " over ", DescribeGroupNames(groups), ", averager ",
      o.averager.kind == AveragerSpec::Kind::kHierarchical ? "hierarchical"
                                                           : "periodic",
      " {", absl::StrJoin(periods, ", "), "} warm-up ", o.averager.warmup_steps,
      ", start_localsgd_iter ", o.start_localsgd_iter,
      ", post_local_gradient_allreduce ", o.post_local_gradient_allreduce,
      ", subgroup_size ", o.subgroup_size);
}

// Loads the state every rank resumes with, agreed: a rank that refuses it
// refuses Create on every rank.
absl::Status LoadAgreed(Communicator& communicator,
                        LocalSgdOptimizer& optimizer,
                        const OptimizerStateDict& state, int64_t step,
                        std::vector<std::string>* warnings) {
  return AgreeOnEveryRank(communicator,
                          optimizer.LoadStateDict(state, step, warnings),
                          "the checkpoint's state", "nothing was created");
}

}  // namespace

absl::Status LocalSgdRunner::ResumeLocked(
    Communicator& communicator, const LocalSgdSpec& spec,
    const std::vector<ParamGroup>& tensors, LocalSgdOptimizer& optimizer,
    std::vector<std::string>* warnings, bool* changed) {
  std::optional<RestoredGroupOptimizer> restored;
  if (restored_.has_value()) {
    const GroupCheckpoint& group = restored_->group;
    restored = DescribeRestored(
        group, Describe(group.kind, group.groups, restored_->options),
        resources_.checkpoint_dir,
        ReadGroupPart<LocalSgdCheckpoint, ReadLocalSgdCheckpoint>);
  }
  absl::StatusOr<GroupResume> resume = AgreeOnRestoredState(
      communicator, restored, Describe(spec.kind, spec.groups, spec.options),
      "post-local SGD", "CreatePostLocalSgd");
  if (!resume.ok()) return resume.status();
  if (!resume->restored) return absl::OkStatus();
  if (resume->OwnState(communicator.size())) {
    absl::StatusOr<OptimizerStateDict> state = ResumeOwnState(
        communicator, *resume, restored_->group, resources_.checkpoint_dir,
        "post-local SGD", spec.groups, tensors,
        ReadGroupPart<LocalSgdCheckpoint, ReadLocalSgdCheckpoint>, changed);
    if (!state.ok()) return state.status();
    return LoadAgreed(communicator, optimizer, *state, resume->step, warnings);
  }
  // Another world size: the ranks' local models and states do not map onto
  // the new ranks, so every rank resumes as a copy of the lowest rank that
  // restored the checkpoint (its parameters and local state), as the group
  // is right after an averaging; the averager's step goes on.
  absl::StatusOr<OptimizerStateDict> state = OptimizerStateDict();
  if (communicator.rank() == resume->source_rank) {
    *state = restored_->group.state;
  } else {
    absl::Status read = ReadSavedRank(
        *resume, resume->source_saved_rank, "post-local SGD",
        [&](const CheckpointSections& sections) -> absl::StatusOr<bool> {
          absl::StatusOr<std::optional<LocalSgdCheckpoint>> saved =
              ReadLocalSgdCheckpoint(
                  sections, [&](const checkpoint::SavedGroupOptimizer& h) {
                    return resume->Holds(h, resume->source_saved_rank);
                  });
          if (!saved.ok()) return saved.status();
          if (!saved->has_value()) return false;
          *state = std::move((*saved)->group.state);
          return true;
        });
    if (!read.ok()) state = read;
  }
  absl::Status read =
      AgreeOnEveryRank(communicator, state.status(),
                       "the checkpoint's local state", "nothing was created");
  if (!read.ok()) return read;
  *changed = true;
  absl::Status sent =
      BroadcastParameters(communicator, tensors, resume->source_rank);
  if (!sent.ok()) return sent;
  return LoadAgreed(communicator, optimizer, *state, resume->step, warnings);
}

absl::StatusOr<std::optional<LocalSgdCheckpoint>> LocalSgdRunner::Snapshot(
    absl::FunctionRef<absl::Status()> while_stopped) const {
  absl::MutexLock lock(&mutex_);
  return SnapshotGroupOptimizer<LocalSgdCheckpoint>(
      optimizer_ != nullptr,
      optimizer_ != nullptr ? optimizer_->damage() : absl::OkStatus(),
      [&]() -> absl::StatusOr<LocalSgdCheckpoint> {
        LocalSgdCheckpoint saved;
        GroupCheckpoint& group = saved.group;
        group.kind = spec_.kind;
        group.groups = spec_.groups;
        group.timeout = spec_.timeout;
        group.rank = resources_.rank();
        group.world_size = optimizer_->world_size();
        group.step = optimizer_->step();
        group.run = run_;
        absl::StatusOr<OptimizerStateDict> state = optimizer_->StateDict();
        if (!state.ok()) return state.status();
        group.state = *std::move(state);
        saved.options = spec_.options;
        return saved;
      },
      restored_, while_stopped);
}

void LocalSgdRunner::SetRestored(LocalSgdCheckpoint restored) {
  absl::MutexLock lock(&mutex_);
  restored_ = std::move(restored);
}

absl::Status LocalSgdRunner::Damage() const {
  absl::MutexLock lock(&mutex_);
  return optimizer_ == nullptr ? absl::OkStatus() : optimizer_->damage();
}

}  // namespace distopt
