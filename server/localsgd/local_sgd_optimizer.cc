#include "server/localsgd/local_sgd_optimizer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/comm/agreement.h"
#include "server/data_parallel/collective_hyperparameters.h"
#include "server/data_parallel/gradient_buckets.h"
#include "server/localsgd/parameter_averaging.h"
#include "server/optim/state_dict_split.h"

namespace distopt {
namespace {

// Gradients and averaged parameters travel in buckets of DDP's 25 MiB: the
// scratch they need is bounded by it, not by the model.

std::string DescribeAverager(const AveragerSpec& spec) {
  std::vector<std::string> periods;
  for (const auto& [period, size] : spec.periods) {
    periods.push_back(absl::StrCat(period, ":", size));
  }
  return absl::StrCat(
      spec.kind == AveragerSpec::Kind::kPeriodic ? "periodic" : "hierarchical",
      " warmup_steps=", spec.warmup_steps,
      " periods=", absl::StrJoin(periods, ","));
}

// Every parameter owned by "rank" 0: the buckets are all-reduced whole,
// not split among owners.
std::vector<std::vector<int>> SingleOwner(
    const std::vector<ParamGroup>& groups) {
  std::vector<std::vector<int>> owner;
  for (const ParamGroup& group : groups) {
    owner.emplace_back(group.params.size(), 0);
  }
  return owner;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalSgdOptimizer>> LocalSgdOptimizer::Create(
    CommunicatorGroup& group, const OptimizerKind* kind,
    const std::string& kind_name, std::vector<ParamGroup> groups,
    const LocalSgdOptions& options, std::vector<std::string>* warnings,
    MemoryBudget* budget) {
  Communicator& global = group.global();
  // The parameters, their buckets and the optimizers' state live where the
  // group's tensor collectives run.
  const Device device = global.tensors().device();
  absl::StatusOr<std::shared_ptr<Backend>> backend = GetBackend(device);
  absl::Status valid = backend.status();
  if (valid.ok()) valid = CheckFloatingParameters(groups, 0, device);
  valid = AgreeOnEveryRank(global, valid, "the parameters");
  if (!valid.ok()) return valid;
  SpecificationParts parts = DescribeSpecification(*kind, kind_name, groups);
  parts.emplace_back("averager", DescribeAverager(options.averager));
  parts.emplace_back(
      "gradient reduction",
      absl::StrCat("start_localsgd_iter=", options.start_localsgd_iter,
                   " post_local_gradient_allreduce=",
                   options.post_local_gradient_allreduce,
                   " subgroup_size=", options.subgroup_size,
                   " bucket_bytes=", options.bucket_bytes));
  absl::Status same = CheckSameOnEveryRank(global, parts);
  if (!same.ok()) return same;
  // The same specification on every rank: what follows fails alike on all.
  absl::StatusOr<ModelAverager> averager =
      ModelAverager::Create(options.averager, global.size(), warnings);
  if (!averager.ok()) return averager.status();
  if (options.start_localsgd_iter < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("start_localsgd_iter: ", options.start_localsgd_iter,
                     "; expected a number >= 0"));
  }
  if (options.post_local_gradient_allreduce &&
      (options.subgroup_size < 1 ||
       global.size() % options.subgroup_size != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("subgroup_size: ", options.subgroup_size,
                     "; expected a divisor of the world size ", global.size()));
  }
  if (options.start_localsgd_iter != options.averager.warmup_steps) {
    warnings->push_back(absl::StrCat(
        "start_localsgd_iter (", options.start_localsgd_iter,
        ") differs from the averager's warmup_steps (",
        options.averager.warmup_steps,
        "); post-local SGD usually switches both at the same step"));
  }
  std::vector<std::unique_ptr<FunctionalOptimizer>> local;
  absl::Status made;
  for (size_t g = 0; g < groups.size() && made.ok(); ++g) {
    std::vector<int> every(groups[g].params.size());
    for (size_t i = 0; i < every.size(); ++i) every[i] = static_cast<int>(i);
    absl::StatusOr<std::unique_ptr<FunctionalOptimizer>> optimizer =
        CreateGroupOptimizer(kind, groups[g], every, g, device, budget);
    made = optimizer.status();
    if (made.ok()) local.push_back(*std::move(optimizer));
  }
  made = AgreeOnEveryRank(global, made, "the optimizer");
  if (!made.ok()) return made;
  return std::unique_ptr<LocalSgdOptimizer>(new LocalSgdOptimizer(
      kind_name, std::move(groups), std::move(local), *std::move(averager),
      options, global.size(), *std::move(backend)));
}

absl::StatusOr<Communicator*> LocalSgdOptimizer::GradientReducer(
    CommunicatorGroup& group) {
  if (averager_.step() < options_.start_localsgd_iter) return &group.global();
  // Subgroups of one rank would average each gradient with itself.
  if (!options_.post_local_gradient_allreduce || options_.subgroup_size == 1) {
    return nullptr;
  }
  return group.Subgroup(options_.subgroup_size);
}

absl::Status LocalSgdOptimizer::Step(CommunicatorGroup& group,
                                     const GroupGradientPointers& grads,
                                     const absl::Status& refused) {
  if (!damage_.ok()) return damage_;
  changing_ = false;
  absl::Status status = StepOnce(group, grads, refused);
  if (!status.ok() && changing_) {
    damage_ = absl::FailedPreconditionError(absl::StrCat(
        "post-local SGD: a step failed half-way on rank ",
        group.global().rank(), " (", status.message(),
        "): this rank's parameters may be stepped but not averaged; "
        "expected recovery first: write the parameters back (a checkpoint's, "
        "or the averaged values of healthy ranks), then LoadStateDict (a "
        "state dict saved earlier) on every rank"));
  }
  return status;
}

absl::Status LocalSgdOptimizer::StepOnce(CommunicatorGroup& group,
                                         const GroupGradientPointers& grads,
                                         const absl::Status& refused) {
  const absl::Status valid =
      refused.ok() ? CheckGradients(groups_, grads) : refused;
  // 1. One all-gather: whether each rank refused the step (each then
  // returns at once, so none waits in a collective the others skip), every
  // rank's step (which must agree, or the ranks would average at different
  // steps and wait on each other) and which parameters it has gradients
  // for.
  Communicator& global = group.global();
  std::vector<float> mine = {valid.ok() ? 0.0f : 1.0f};
  for (float f : EncodeAsFloats(averager_.step())) mine.push_back(f);
  const size_t header = mine.size();
  // As long on every rank: from the groups, not from what this rank was
  // given (`valid` says when that does not fit).
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      mine.push_back(valid.ok() && grads[g][i] != nullptr);
    }
  }
  std::vector<float> all(mine.size() * global.size());
  absl::Status status = global.AllGather(mine, absl::MakeSpan(all));
  if (!status.ok()) return status;
  std::vector<float> refusals;
  for (int r = 0; r < global.size(); ++r) {
    refusals.push_back(all[r * mine.size()]);
  }
  status = VerdictOfRefusals(global, refusals, valid, "the step");
  if (!status.ok()) return status;
  for (int r = 0; r < global.size(); ++r) {
    const uint64_t step = DecodeFromFloats(&all[r * mine.size() + 1]);
    if (step != static_cast<uint64_t>(averager_.step())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step: rank ", r, " is at step ", step, ", this rank (",
          global.rank(), ") at ", averager_.step(),
          "; expected every rank at the same step (load the same state dict "
          "step on every rank)"));
    }
  }
  Presence present(groups_.size());
  size_t k = header;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i, ++k) {
      bool any = false;
      for (int r = 0; r < global.size(); ++r) {
        any = any || all[r * mine.size() + k] > 0;
      }
      present[g].push_back(any);
    }
  }
  // 2 and 3. Gradients averaged over the reducing group bucket by bucket,
  // each bucket's parameters stepped as soon as it is (or this rank's own
  // gradients, when nothing reduces them). From the first step on, a
  // failure leaves this rank's model half-way.
  absl::StatusOr<Communicator*> reducer = GradientReducer(group);
  if (!reducer.ok()) return reducer.status();
  if (*reducer == nullptr) {
    changing_ = true;
    for (size_t g = 0; g < groups_.size(); ++g) {
      status = local_[g]->Step(groups_[g].params, grads[g]);
      if (!status.ok()) return status;
    }
  }
  const std::vector<GradientBucket> plan =
      *reducer == nullptr
          ? std::vector<GradientBucket>()
          : PlanGradientBuckets(
                groups_, SingleOwner(groups_), 1, present,
                options_.bucket_bytes / static_cast<int64_t>(sizeof(float)));
  absl::StatusOr<absl::Span<float>> storage =
      gradient_storage_.Elements<float>(LargestBucket(plan));
  // A rank that cannot take part breaks the round (communicator.h).
  if (!storage.ok()) return AsCollectiveFailure(storage.status());
  for (const GradientBucket& bucket : plan) {
    absl::Span<float> values = storage->subspan(0, bucket.size);
    status = AsCollectiveFailure(FillBucket(bucket, grads, values, *device_));
    if (status.ok()) {
      status = (*reducer)->tensors().AllReduce(values, ReduceOp::kAverage);
    }
    if (status.ok()) {
      status = AsCollectiveFailure(StepBucket(
          bucket, groups_, values, steppers_, &narrowed_storage_, &changing_));
    }
    if (!status.ok()) return status;
  }
  // 4. Model averaging, when the averager says so.
  const std::optional<int> group_size = averager_.GroupSizeAt(averager_.step());
  if (group_size.has_value() && *group_size > 1) {
    absl::StatusOr<Communicator*> averaging = group.Subgroup(*group_size);
    if (!averaging.ok()) return averaging.status();
    std::vector<Tensor*> params;
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (size_t i = 0; i < groups_[g].params.size(); ++i) {
        if (present[g][i]) params.push_back(groups_[g].params[i]);
      }
    }
    status = AverageParameters(
        (*averaging)->tensors(), params,
        options_.bucket_bytes / static_cast<int64_t>(sizeof(float)),
        &average_storage_);
    if (!status.ok()) return status;
  }
  averager_.Advance();
  return absl::OkStatus();
}

absl::Status LocalSgdOptimizer::SetHyperparameters(
    CommunicatorGroup& group, int index,
    const absl::flat_hash_map<std::string, HyperValue>& changes) {
  return SetHyperparametersOnEveryRank(group.global(), local_, index, changes);
}

absl::StatusOr<OptimizerStateDict> LocalSgdOptimizer::StateDict() const {
  const std::vector<std::vector<int64_t>> positions = GlobalPositions(groups_);
  return MergeStateDicts(OptimizersOf(steppers_), kind_name_, positions,
                         positions);
}

absl::Status LocalSgdOptimizer::LoadStateDict(
    const OptimizerStateDict& state_dict, std::optional<int64_t> step,
    std::vector<std::string>* warnings) {
  if (step.has_value() && *step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: ", *step, "; expected a count >= 0"));
  }
  const std::vector<std::vector<int64_t>> positions = GlobalPositions(groups_);
  absl::StatusOr<std::vector<OptimizerStateDict>> shares =
      SplitStateDict(state_dict, positions, positions);
  if (!shares.ok()) return shares.status();
  absl::StatusOr<std::vector<OptimizerStateDict>> loaded =
      LoadAllOrNothing(OptimizersOf(steppers_), kind_name_, *shares, "");
  if (!loaded.ok()) return loaded.status();
  if (!step.has_value()) {
    warnings->push_back(
        "the loaded state dict has no step for the averager; its step is "
        "set to 0");
  }
  averager_.set_step(step.value_or(0));
  damage_ = absl::OkStatus();
  return absl::OkStatus();
}

}  // namespace distopt
