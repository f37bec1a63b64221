#include "server/zero/zero_runner.h"

#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/log.h"
#include "common/metrics.h"
#include "server/comm/agreement.h"
#include "server/data_parallel/locked_collective.h"
#include "server/data_parallel/restored_checkpoint.h"
#include "server/optim/step_metrics.h"
#include "server/zero/zero_reshard.h"

namespace distopt {
namespace {

// Each rank's byte counts in the group's store, for GetZero on any rank.
constexpr absl::string_view kRankBytesKey = "zero/bytes/";

// Steps a joined rank took part in (Join's rounds), for /metrics.
prometheus::Counter& JoinRounds() {
  static prometheus::Counter& counter = metrics::CounterWith(
      metrics::CounterFamily("distopt_zero_join_rounds_total",
                             "ZeRO steps this rank shadowed after its Join "
                             "(its data ran out, the others' had not)"),
      {});
  return counter;
}

}  // namespace

absl::Status ZeroRunner::CheckCreatedLocked() const {
  if (optimizer_ == nullptr) {
    return replacement_.NotCreated(absl::FailedPreconditionError(
        "zero: no ZeRO optimizer on this daemon; expected CreateZero first"));
  }
  return absl::OkStatus();
}

absl::Status ZeroRunner::CheckCurrentLocked() {
  if (optimizer_ == nullptr) return CheckCreatedLocked();
  absl::StatusOr<GroupMembership*> membership = resources_.Group();
  if (!membership.ok() || !replacement_.Replaced(**membership)) {
    return absl::OkStatus();
  }
  log::Warning("ZeRO optimizer dropped: a rank of the group was replaced",
               {{"group_step", steps_}});
  optimizer_.reset();
  groups_.clear();
  consolidated_.reset();
  {
    absl::MutexLock lock(&published_mutex_);
    published_.reset();
    unpublished_ = CheckCreatedLocked();
  }
  restored_ = LastGroupCheckpoint<ZeroCheckpoint, ReadZeroCheckpoint>(
      resources_.checkpoint_dir);
  return CheckCreatedLocked();
}

ZeroInfo ZeroRunner::StatusLocked() const {
  ZeroInfo status;
  status.kind = spec_.kind;
  status.options = spec_.options;
  status.groups = static_cast<int>(groups_.size());
  const ZeroPartition& partition = optimizer_->partition();
  status.world_size = static_cast<int>(partition.load.size());
  status.rank = resources_.rank();
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      status.owners.emplace_back(groups_[g][i]->name(), partition.owner[g][i]);
      status.parameter_bytes += groups_[g][i]->byte_size();
    }
  }
  status.loads = partition.load;
  status.damage = optimizer_->damage();
  status.state_bytes = optimizer_->state_bytes();
  status.scratch_bytes = optimizer_->scratch_bytes();
  status.steps = steps_;
  status.gradient_bytes = status.parameter_bytes;
  return status;
}

void ZeroRunner::PublishLocked() {
  ZeroInfo status = StatusLocked();
  // The bytes change only when state and scratch are first made (or a
  // group is added):
  // most steps publish nothing, so a step pays no extra round trip to the
  // store. Steps are not published: the ranks step together.
  const std::string record =
      absl::StrCat(status.parameter_bytes, " ", status.gradient_bytes, " ",
                   status.state_bytes, " ", status.scratch_bytes);
  GroupMembership* membership = resources_.membership->load();
  if (membership != nullptr && record != published_record_) {
    // Best effort: GetZero then lacks this rank's figures.
    if (membership->Publish(absl::StrCat(kRankBytesKey, status.rank), record)
            .ok()) {
      published_record_ = record;
    }
  }
  absl::MutexLock lock(&published_mutex_);
  published_ = std::move(status);
}

absl::StatusOr<ZeroInfo> ZeroRunner::Create(const ZeroSpec& spec) {
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
  absl::Status refused = spec.refused;
  if (refused.ok()) refused = kind.status();
  if (refused.ok() && optimizer_ != nullptr) {
    refused = absl::AlreadyExistsError(
        "zero: this daemon already has a ZeRO optimizer");
  }
  absl::StatusOr<ParameterGroups> groups = FindGroupsOnEveryRank(
      **membership, spec.timeout, *resources_.parameters, spec.groups, refused);
  if (!groups.ok()) return groups.status();
  absl::StatusOr<std::unique_ptr<ZeroOptimizer>> optimizer;
  absl::StatusOr<int64_t> resumed_step;
  absl::StatusOr<GroupRun> run;
  absl::Status ran = RunLockedCollective(
      **membership, spec.timeout, *groups,
      [&](CommunicatorGroup& communicators, bool* changed) {
        const std::vector<ParamGroup> tensors =
            ToParamGroups(spec.groups, *groups);
        optimizer = ZeroOptimizer::Create(&communicators.global(), *kind,
                                          spec.kind, tensors, spec.options,
                                          &resources_.parameters->budget());
        if (!optimizer.ok()) return optimizer.status();
        resumed_step = ResumeLocked(communicators.global(), spec, tensors,
                                    **optimizer, changed);
        if (!resumed_step.ok()) return resumed_step.status();
        run = FormGroupRun(communicators.global(), resources_.checkpoint_dir);
        return run.status();
      });
  if (!ran.ok()) return ran;
  steps_ = *resumed_step;
  run_ = *std::move(run);
  restored_.reset();
  spec_ = spec;
  step_metrics_ = &StepMetrics::For("zero", spec_.kind);
  groups_ = *std::move(groups);
  optimizer_ = *std::move(optimizer);
  replacement_.Created(replacements);
  PublishLocked();
  return StatusLocked();
}

absl::Status ZeroRunner::Step(uint64_t context_id, absl::string_view caller) {
  const absl::Status joined = absl::FailedPreconditionError(
      "zero: this rank has joined (its data ran out) and takes part in the "
      "other ranks' steps until all have joined; expected no Step until Join "
      "returns");
  // Checked without the lock (a joined rank holds it in the other ranks'
  // collectives) and again under it (between two of Join's rounds).
  if (joined_) return joined;
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
  if (joined_) return joined;
  if (!optimizer_->damage().ok()) {
    step_metrics.Failed();
    return optimizer_->damage();
  }
  absl::Status status = RunCollectiveStep(
      **membership, spec_.timeout, context, groups_,
      [&](CommunicatorGroup&, const GroupGradientPointers& gradients,
          const absl::Status& refused) {
        return optimizer_->Step(gradients, refused);
      },
      [&] { return !optimizer_->damage().ok(); });
  if (!status.ok()) {
    step_metrics.Failed();
    if (!optimizer_->damage().ok()) {
      consolidated_.reset();
      PublishLocked();  // GetZero says so.
    }
    CheckCurrentLocked().IgnoreError();  // Dropped now if replaced.
    return status;
  }
  step_metrics.Applied(timer.Seconds(), 0, 0);
  consolidated_.reset();  // Stale once the state moves on.
  CountStepLocked();
  PublishLocked();
  if (hooks_.after != nullptr) hooks_.after(steps_);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ZeroRunner::Join() {
  absl::StatusOr<GroupMembership*> membership = resources_.Group();
  if (!membership.ok()) return membership.status();
  {
    absl::MutexLock lock(&mutex_);
    absl::Status created = CheckCurrentLocked();
    if (!created.ok()) return created;
    // As Step: a torn optimizer takes part in no collective until it is
    // recovered (a shadow round would mark its parameters changed).
    if (!optimizer_->damage().ok()) return optimizer_->damage();
    if (joined_.exchange(true)) {
      return absl::FailedPreconditionError(
          "zero: this rank is already joining; expected one Join at a time");
    }
  }
  // One round at a time, so that GetZero answers in between.
  int64_t shadowed = 0;
  while (true) {
    absl::MutexLock lock(&mutex_);
    bool more = false;
    absl::Status status = RunLockedCollective(
        **membership, spec_.timeout, groups_,
        [&](CommunicatorGroup&, bool* changed) {
          absl::StatusOr<bool> stepped = optimizer_->ShadowStep();
          // The last round, with no rank active, changes nothing.
          more = stepped.ok() && *stepped;
          *changed = more || !optimizer_->damage().ok();
          return stepped.status();
        });
    if (!status.ok() || !more) {
      joined_ = false;
      if (!optimizer_->damage().ok()) PublishLocked();
      if (!status.ok()) return status;
      return shadowed;
    }
    consolidated_.reset();
    CountStepLocked();
    metrics::Add(JoinRounds());
    ++shadowed;
    PublishLocked();
  }
}

absl::StatusOr<ZeroInfo> ZeroRunner::AddParamGroup(
    const NamedGroupSpec& group) {
  absl::StatusOr<GroupMembership*> membership = resources_.Group();
  if (!membership.ok()) return membership.status();
  absl::MutexLock lock(&mutex_);
  absl::Status created = CheckCurrentLocked();
  if (!created.ok()) return created;
  absl::StatusOr<ParameterGroups> found =
      FindGroupsOnEveryRank(**membership, spec_.timeout, *resources_.parameters,
                            {group}, absl::OkStatus(), groups_.size(), groups_);
  if (!found.ok()) return found.status();
  absl::Status status = RunLockedCollective(
      **membership, spec_.timeout, *found, [&](CommunicatorGroup&, bool*) {
        return optimizer_->AddParamGroup(ToParamGroups({group}, *found)[0]);
      });
  if (!status.ok()) return status;
  groups_.push_back((*found)[0]);
  spec_.groups.push_back(group);  // What a checkpoint's spec holds.
  consolidated_.reset();
  PublishLocked();
  return StatusLocked();
}

absl::StatusOr<ZeroInfo> ZeroRunner::SetHyperparameters(
    int group, const absl::flat_hash_map<std::string, HyperValue>& changes) {
  absl::StatusOr<GroupMembership*> membership = resources_.Group();
  if (!membership.ok()) return membership.status();
  absl::MutexLock lock(&mutex_);
  absl::Status created = CheckCurrentLocked();
  if (!created.ok()) return created;
  absl::Status status = (*membership)->Run(spec_.timeout, [&](Communicator&) {
    return optimizer_->SetHyperparameters(group, changes);
  });
  if (!status.ok()) return status;
  consolidated_.reset();
  PublishLocked();
  return StatusLocked();
}

absl::StatusOr<bool> ZeroRunner::ConsolidateStateDict(int to) {
  absl::StatusOr<GroupMembership*> membership = resources_.Group();
  if (!membership.ok()) return membership.status();
  absl::MutexLock lock(&mutex_);
  absl::Status created = CheckCurrentLocked();
  if (!created.ok()) return created;
  std::optional<OptimizerStateDict> whole;
  absl::Status status = (*membership)->Run(spec_.timeout, [&](Communicator&) {
    absl::StatusOr<std::optional<OptimizerStateDict>> gathered =
        optimizer_->ConsolidateStateDict(to);
    if (!gathered.ok()) return gathered.status();
    whole = *std::move(gathered);
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  consolidated_.reset();
  if (!whole.has_value()) return false;
  NamedStateDict named;
  named.state_dict = *std::move(whole);
  for (const auto& parameter : Flatten(groups_)) {
    named.parameter_names.push_back(parameter->name());
  }
  consolidated_ = std::move(named);
  return true;
}

absl::StatusOr<NamedStateDict> ZeroRunner::GetStateDict() const {
  absl::MutexLock lock(&mutex_);
  absl::Status created = CheckCreatedLocked();
  if (!created.ok()) return created;
  if (!consolidated_.has_value()) {
    return absl::FailedPreconditionError(
        "zero: this rank holds no consolidated state dict (none was "
        "gathered here since the last step); expected ConsolidateStateDict "
        "with `to` = this rank first");
  }
  return *consolidated_;
}

absl::StatusOr<OptimizerStateDict> ZeroRunner::ByPositionLocked(
    const NamedStateDict& named) const {
  absl::flat_hash_map<std::string, int64_t> position;
  for (const auto& parameter : Flatten(groups_)) {
    position.emplace(parameter->name(), position.size());
  }
  if (named.parameter_names.size() != position.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state_dict.parameter_names: ", named.parameter_names.size(),
        " names; expected ", position.size(), ", one per parameter"));
  }
  // Where each saved position is now.
  std::vector<int64_t> now;
  absl::flat_hash_set<std::string> seen;
  for (size_t p = 0; p < named.parameter_names.size(); ++p) {
    const std::string& name = named.parameter_names[p];
    auto it = position.find(name);
    if (it == position.end() || !seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "state_dict.parameter_names[", p, "]: \"", name, "\"; expected ",
          it == position.end() ? "a parameter of this optimizer"
                               : "each name once"));
    }
    now.push_back(it->second);
  }
  OptimizerStateDict dict = named.state_dict;
  for (auto& group : dict.param_groups) {
    for (int64_t& p : group.params) {
      if (p < 0 || p >= static_cast<int64_t>(now.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("state_dict.param_groups: position ", p,
                         "; expected 0 to ", now.size() - 1));
      }
      p = now[p];
    }
  }
  dict.state.clear();
  for (const auto& [p, entry] : named.state_dict.state) {
    if (p < 0 || p >= static_cast<int64_t>(now.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("state_dict.state[", p,
                       "]: no such position; expected 0 to ", now.size() - 1));
    }
    dict.state[now[p]] = entry;
  }
  return dict;
}

absl::Status ZeroRunner::LoadStateDict(
    const absl::StatusOr<NamedStateDict>& named) {
  absl::StatusOr<GroupMembership*> membership = resources_.Group();
  if (!membership.ok()) return membership.status();
  absl::MutexLock lock(&mutex_);
  absl::Status created = CheckCurrentLocked();
  if (!created.ok()) return created;
  const absl::StatusOr<OptimizerStateDict> dict =
      named.ok() ? ByPositionLocked(*named)
                 : absl::StatusOr<OptimizerStateDict>(named.status());
  // The parameters' locks are held: the check that every rank holds the
  // same values reads them.
  absl::Status status = RunLockedCollective(
      **membership, spec_.timeout, groups_, [&](CommunicatorGroup&, bool*) {
        return optimizer_->LoadStateDict(
            dict, ZeroOptimizer::Given::kTheSameOnEveryRank);
      });
  if (!status.ok()) return status;
  consolidated_.reset();
  PublishLocked();
  return absl::OkStatus();
}

namespace {

// An optimizer as a checkpoint's is compared with the one being created.
std::string Describe(const std::string& kind,
                     const std::vector<NamedGroupSpec>& groups,
                     const ZeroOptions& options) {
  return absl::StrCat(
      kind, " over ", DescribeGroupNames(groups),
      ", gradient_sharded=", options.gradient_sharded,
      ", overlap=", options.overlap,
      ", parameters_as_bucket_view=", options.parameters_as_bucket_view);
}

}  // namespace

absl::StatusOr<int64_t> ZeroRunner::ResumeLocked(
    Communicator& communicator, const ZeroSpec& spec,
    const std::vector<ParamGroup>& tensors, ZeroOptimizer& optimizer,
    bool* changed) {
  std::optional<RestoredGroupOptimizer> restored;
  if (restored_.has_value()) {
    const GroupCheckpoint& group = restored_->group;
    restored = DescribeRestored(
        group, Describe(group.kind, group.groups, restored_->options),
        resources_.checkpoint_dir,
        ReadGroupPart<ZeroCheckpoint, ReadZeroCheckpoint>);
  }
  absl::StatusOr<GroupResume> resume = AgreeOnRestoredState(
      communicator, restored, Describe(spec.kind, spec.groups, spec.options),
      "ZeRO", "CreateZero (with every group, the added ones too)");
  if (!resume.ok()) return resume.status();
  if (!resume->restored) return 0;
  if (resume->OwnState(communicator.size())) {
    // Each rank keeps its own share: the same partition, so its own shard.
    absl::StatusOr<OptimizerStateDict> state = ResumeOwnState(
        communicator, *resume, restored_->group, resources_.checkpoint_dir,
        "ZeRO", spec.groups, tensors,
        ReadGroupPart<ZeroCheckpoint, ReadZeroCheckpoint>, changed);
    if (!state.ok()) return state.status();
    absl::Status loaded = optimizer.LoadStateDict(
        *state, ZeroOptimizer::Given::kEachRankItsOwnShard);
    if (!loaded.ok()) return loaded;
    return resume->step;
  }
  // Another world size: every rank reads its new share from the saved
  // ranks' files, all before anything changes.
  absl::StatusOr<OptimizerStateDict> share = ReadReshardedState(
      *resume, tensors, optimizer.partition(), communicator.rank());
  absl::Status read =
      AgreeOnEveryRank(communicator, share.status(), "the checkpoint's shards",
                       "nothing was created");
  if (!read.ok()) return read;
  // Ranks new to the group start from the model the checkpoint holds: that
  // of the lowest rank that restored it (every rank's is the same at a
  // group step).
  *changed = true;
  absl::Status sent =
      BroadcastParameters(communicator, tensors, resume->source_rank);
  if (!sent.ok()) return sent;
  absl::Status loaded = optimizer.LoadStateDict(
      *share, ZeroOptimizer::Given::kEachRankItsOwnShard);
  if (!loaded.ok()) return loaded;
  return resume->step;
}

absl::StatusOr<std::optional<ZeroCheckpoint>> ZeroRunner::Snapshot(
    absl::FunctionRef<absl::Status()> while_stopped) const {
  absl::MutexLock lock(&mutex_);
  return SnapshotGroupOptimizer<ZeroCheckpoint>(
      optimizer_ != nullptr,
      optimizer_ != nullptr ? optimizer_->damage() : absl::OkStatus(),
      [&]() -> absl::StatusOr<ZeroCheckpoint> {
        ZeroCheckpoint saved;
        GroupCheckpoint& group = saved.group;
        group.kind = spec_.kind;
        group.groups = spec_.groups;
        group.timeout = spec_.timeout;
        group.rank = resources_.rank();
        group.world_size =
            static_cast<int>(optimizer_->partition().load.size());
        group.step = steps_;
        group.run = run_;
        absl::StatusOr<OptimizerStateDict> shard = optimizer_->ShardStateDict();
        if (!shard.ok()) return shard.status();
        group.state = *std::move(shard);
        saved.options = spec_.options;
        return saved;
      },
      restored_, while_stopped);
}

void ZeroRunner::SetRestored(ZeroCheckpoint restored) {
  absl::MutexLock lock(&mutex_);
  restored_ = std::move(restored);
}

absl::StatusOr<ZeroInfo> ZeroRunner::Get() const {
  ZeroInfo status;
  {
    absl::MutexLock lock(&published_mutex_);
    if (!published_.has_value()) return unpublished_;
    status = *published_;
  }
  status.joined = joined_;
  // The other ranks' figures come from the store, outside the lock: a slow
  // store must not hold up this rank's steps.
  GroupMembership* membership = resources_.membership->load();
  for (int r = 0; r < status.world_size && membership != nullptr; ++r) {
    absl::StatusOr<std::string> record = membership->Lookup(
        absl::StrCat(kRankBytesKey, r), absl::Milliseconds(200));
    ZeroRankBytes bytes;
    bytes.rank = r;
    std::vector<std::string> fields = absl::StrSplit(
        record.ok() ? *record : std::string(), ' ', absl::SkipEmpty());
    bytes.steps = status.steps;  // Every rank takes part in every step.
    if (fields.size() == 4 &&
        absl::SimpleAtoi(fields[0], &bytes.parameter_bytes) &&
        absl::SimpleAtoi(fields[1], &bytes.gradient_bytes) &&
        absl::SimpleAtoi(fields[2], &bytes.state_bytes) &&
        absl::SimpleAtoi(fields[3], &bytes.scratch_bytes)) {
      status.ranks.push_back(bytes);
    }
  }
  return status;
}

absl::Status ZeroRunner::Damage() const {
  absl::MutexLock lock(&mutex_);
  return optimizer_ == nullptr ? absl::OkStatus() : optimizer_->damage();
}

}  // namespace distopt
