#include "server/zero/zero_optimizer.h"

#include <algorithm>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "server/data_parallel/collective_hyperparameters.h"
#include "server/zero/parameter_broadcast.h"
#include "server/zero/parameter_gather.h"

namespace distopt {
namespace {

// What the ranks must agree on: the kind, the groups and the options.
SpecificationParts DescribeZero(const std::string& kind_name,
                                const std::vector<ParamGroup>& groups,
                                const ZeroOptions& options,
                                int first_group = 0) {
  SpecificationParts parts =
      DescribeSpecification(kind_name, groups, first_group);
  parts.emplace_back(
      "options", absl::StrCat("parameters_as_bucket_view=",
                              options.parameters_as_bucket_view,
                              " overlap=", options.overlap,
                              " gradient_sharded=", options.gradient_sharded,
                              " bucket_bytes=", options.bucket_bytes));
  return parts;
}

absl::Span<char> AsBytes(absl::Span<float> values) {
  return absl::Span<char>(reinterpret_cast<char*>(values.data()),
                          values.size() * sizeof(float));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ZeroOptimizer>> ZeroOptimizer::Create(
    Communicator* communicator, const OptimizerKind* kind,
    const std::string& kind_name, std::vector<ParamGroup> groups,
    const ZeroOptions& options, MemoryBudget* budget) {
  std::unique_ptr<ZeroOptimizer> zero(
      new ZeroOptimizer(communicator, kind, kind_name, options, budget));
  absl::Status valid = AgreeOnEveryRank(
      *communicator, CheckHostFloatingParameters(groups, 0), "the parameters");
  if (!valid.ok()) return valid;
  absl::Status same = CheckSameOnEveryRank(
      *communicator, DescribeZero(kind_name, groups, options));
  if (!same.ok()) return same;
  absl::StatusOr<Extension> extension = zero->PrepareExtension(groups);
  absl::Status made =
      AgreeOnEveryRank(*communicator, extension.status(), "the optimizer");
  if (!made.ok()) return made;
  zero->Extend(std::move(groups), *std::move(extension));
  return zero;
}

absl::Status ZeroOptimizer::AddParamGroup(ParamGroup group) {
  absl::Status valid = AgreeOnEveryRank(
      *communicator_, CheckHostFloatingParameters({group}, groups_.size()),
      "the new group's parameters");
  if (!valid.ok()) return valid;
  absl::Status same = CheckSameOnEveryRank(
      *communicator_,
      DescribeZero(kind_name_, {group}, options_, groups_.size()));
  if (!same.ok()) return same;
  // Prepared everywhere, kept only once every rank could: a rank whose
  // budget cannot hold its share refuses the group on every rank.
  absl::StatusOr<Extension> extension = PrepareExtension({group});
  absl::Status made =
      AgreeOnEveryRank(*communicator_, extension.status(), "the new group");
  if (!made.ok()) return made;
  Extend({std::move(group)}, *std::move(extension));
  return absl::OkStatus();
}

absl::Status ZeroOptimizer::SetHyperparameters(
    int group, const absl::flat_hash_map<std::string, HyperValue>& changes) {
  // The index is part of what the ranks agree on first, so a bad one is
  // refused alike everywhere.
  if (group < 0 || group >= static_cast<int>(groups_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("group: ", group, "; expected 0 to ", groups_.size() - 1));
  }
  return SetHyperparametersOnEveryRank(*communicator_, *local_[group], group,
                                       changes);
}

absl::StatusOr<ZeroOptimizer::Extension> ZeroOptimizer::PrepareExtension(
    const std::vector<ParamGroup>& added) const {
  std::vector<std::vector<int64_t>> counts;
  for (const auto* list : {&groups_, &added}) {
    for (const ParamGroup& group : *list) {
      counts.emplace_back();
      for (const Tensor* p : group.params) {
        counts.back().push_back(p->num_elements());
      }
    }
  }
  absl::StatusOr<ZeroPartition> partition =
      PartitionParameters(counts, communicator_->size());
  if (!partition.ok()) return partition.status();
  // The load is carried across groups in order, so earlier groups keep
  // their owners and their state stays valid.
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (partition->owner[g] != partition_.owner[g]) {
      return absl::InternalError(absl::StrCat(
          "partition: adding a group moved parameters of group ", g));
    }
  }
  std::vector<std::unique_ptr<FunctionalOptimizer>> made;
  const int rank = communicator_->rank();
  for (size_t a = 0; a < added.size(); ++a) {
    const size_t g = groups_.size() + a;
    std::vector<ParameterLayout> layouts;
    for (int index : partition->parameters[rank][g]) {
      const Tensor& p = *added[a].params[index];
      layouts.push_back({p.dtype(), p.shape()});
    }
    // Made even when this rank owns none of the group, so that every rank
    // checks the hyperparameters and can report them in a state dict.
    absl::StatusOr<std::unique_ptr<FunctionalOptimizer>> optimizer =
        FunctionalOptimizer::Create(kind_, added[a].hyperparameters, layouts,
                                    Device::Cpu(), budget_);
    if (!optimizer.ok()) {
      return absl::Status(optimizer.status().code(),
                          absl::StrCat("groups[", g, "].hyperparameters: ",
                                       optimizer.status().message()));
    }
    made.push_back(*std::move(optimizer));
  }
  return Extension{*std::move(partition), std::move(made)};
}

void ZeroOptimizer::Extend(std::vector<ParamGroup> added, Extension extension) {
  for (size_t a = 0; a < added.size(); ++a) {
    groups_.push_back(std::move(added[a]));
    local_.push_back(std::move(extension.optimizers[a]));
  }
  partition_ = std::move(extension.partition);
  const int rank = communicator_->rank();
  local_position_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    local_position_[g].assign(groups_[g].params.size(), -1);
    const std::vector<int>& mine = partition_.parameters[rank][g];
    for (size_t j = 0; j < mine.size(); ++j) local_position_[g][mine[j]] = j;
  }
}

absl::Status ZeroOptimizer::Step(const GroupGradientPointers& grads) {
  if (!damage_.ok()) return damage_;
  absl::Status valid = CheckGradients(groups_, grads);
  if (!valid.ok()) return valid;
  return Round(grads, /*active=*/true).status();
}

absl::StatusOr<bool> ZeroOptimizer::ShadowStep() {
  if (!damage_.ok()) return damage_;
  GroupGradientPointers none(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    none[g].assign(groups_[g].params.size(), nullptr);
  }
  return Round(none, /*active=*/false);
}

absl::StatusOr<bool> ZeroOptimizer::Round(const GroupGradientPointers& grads,
                                          bool active) {
  // First, one small all-reduce: how many ranks are still active (a joined
  // rank only shadows the others), and which parameters have a gradient
  // somewhere. Every rank then plans the same buckets and issues the same
  // collectives.
  std::vector<float> header = {active ? 1.0f : 0.0f};
  for (const auto& group : grads) {
    for (const Tensor* grad : group) header.push_back(grad != nullptr);
  }
  absl::Status status =
      communicator_->AllReduce(absl::MakeSpan(header), ReduceOp::kSum);
  if (!status.ok()) return status;
  if (header[0] == 0) return false;
  Presence present(groups_.size());
  size_t k = 1;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      present[g].push_back(header[k++] > 0);
    }
  }
  const std::vector<GradientBucket> plan = PlanGradientBuckets(
      groups_, partition_.owner, communicator_->size(), present,
      std::max<int64_t>(
          1, options_.bucket_bytes / static_cast<int64_t>(sizeof(float))));
  changing_ = false;
  status = options_.overlap ? ReduceAndStepOverlapped(plan, grads)
                            : ReduceAndStep(plan, grads);
  // Gradient-sharded, each bucket's parameters were gathered already.
  for (int owner = 0; owner < communicator_->size() && status.ok() &&
                      !options_.gradient_sharded;
       ++owner) {
    status = BroadcastFromOwner(*communicator_, groups_, partition_, present,
                                owner, options_.parameters_as_bucket_view,
                                options_.bucket_bytes, &broadcast_scratch_);
  }
  if (!status.ok() && changing_) {
    // This rank's partition (and its optimizer state) may have moved on
    // while other ranks' updates did not arrive: the model is torn.
    damage_ = absl::FailedPreconditionError(absl::StrCat(
        "zero: a step failed half-way on rank ", communicator_->rank(), " (",
        status.message(),
        "): the parameters and optimizer state may mix two steps; expected "
        "recovery first: write the same parameters to every rank (a "
        "checkpoint's, or a healthy rank's), then LoadStateDict on every rank "
        "(a state dict consolidated earlier)"));
  }
  if (!status.ok()) return status;
  return true;
}

absl::Status ZeroOptimizer::Reduce(const GradientBucket& bucket,
                                   absl::Span<float> values) {
  if (bucket.size == 0) return absl::OkStatus();
  // Gradient-sharded (ZeRO-2): each rank receives only its own block's
  // average. Otherwise every rank gets every average (ZeRO-1, as torch).
  return options_.gradient_sharded
             ? communicator_->ReduceScatterBlocks(values, bucket.blocks,
                                                  ReduceOp::kAverage)
             : communicator_->AllReduce(values, ReduceOp::kAverage);
}

absl::Status ZeroOptimizer::StepBucket(const GradientBucket& bucket,
                                       absl::Span<float> values) {
  const int rank = communicator_->rank();
  for (size_t g = 0; g < groups_.size(); ++g) {
    // This rank's parameters of the group in its optimizer's order; only
    // those in the bucket have a gradient this time.
    const std::vector<int>& mine = partition_.parameters[rank][g];
    std::vector<Tensor*> params;
    for (int index : mine) params.push_back(groups_[g].params[index]);
    std::vector<const Tensor*> grads(mine.size(), nullptr);
    std::vector<std::optional<Tensor>> averaged(mine.size());
    bool any = false;
    for (const BucketEntry& entry : bucket.entries) {
      if (entry.owner != rank || entry.group != static_cast<int>(g)) continue;
      const int position = local_position_[g][entry.index];
      absl::StatusOr<Tensor> gradient = BucketGradient(entry, groups_, values);
      if (!gradient.ok()) return gradient.status();
      averaged[position] = *std::move(gradient);
      grads[position] = &*averaged[position];
      any = true;
    }
    if (!any) continue;
    changing_ = true;
    absl::Status status = local_[g]->Step(params, grads);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status ZeroOptimizer::ReduceAndStep(
    const std::vector<GradientBucket>& plan,
    const GroupGradientPointers& grads) {
  gradient_scratch_[0].resize(LargestBucket(plan));
  for (const GradientBucket& bucket : plan) {
    absl::Span<float> values(gradient_scratch_[0].data(), bucket.size);
    absl::Status status = FillBucket(bucket, groups_, grads, values);
    if (status.ok()) status = Reduce(bucket, values);
    if (status.ok()) status = StepBucket(bucket, values);
    if (status.ok() && options_.gradient_sharded) {
      status = GatherBucketParameters(*communicator_, bucket, groups_,
                                      AsBytes(values));
    }
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// Two bucket buffers: while a communication thread reduces bucket k + 1,
// this thread steps bucket k (and fills the next). The first bucket is
// stepped as soon as it is reduced, from the first step on. Gradient-
// sharded, the thread then gathers bucket k's parameters (after reducing
// k + 1), and bucket k's buffer is filled again only once it has.
absl::Status ZeroOptimizer::ReduceAndStepOverlapped(
    const std::vector<GradientBucket>& plan,
    const GroupGradientPointers& grads) {
  const size_t n = plan.size();
  const bool gather = options_.gradient_sharded;
  const int64_t largest = LargestBucket(plan);
  for (auto& scratch : gradient_scratch_) scratch.resize(largest);
  auto values = [&](size_t k) {
    return absl::Span<float>(gradient_scratch_[k % 2].data(), plan[k].size);
  };
  std::vector<absl::Notification> filled(n), reduced(n), stepped(n),
      gathered(n);
  std::vector<absl::Status> reduce_status(n);
  // The thread's first failure; it still notifies every waiter after one.
  absl::Status communication_failure;
  std::thread communication([&] {
    absl::Status& failure = communication_failure;
    auto gather_bucket = [&](size_t k) {
      stepped[k].WaitForNotification();
      if (failure.ok()) {
        failure = GatherBucketParameters(*communicator_, plan[k], groups_,
                                         AsBytes(values(k)));
      }
      gathered[k].Notify();
    };
    for (size_t k = 0; k < n; ++k) {
      filled[k].WaitForNotification();
      if (failure.ok()) failure = Reduce(plan[k], values(k));
      reduce_status[k] = failure;
      reduced[k].Notify();
      if (gather && k > 0) gather_bucket(k - 1);
    }
    if (gather && n > 0) gather_bucket(n - 1);
  });
  absl::Status status;
  auto fill = [&](size_t k) {
    // The buffer was bucket k - 2's: its parameters must have gone out.
    if (gather && k >= 2) gathered[k - 2].WaitForNotification();
    if (status.ok()) status = FillBucket(plan[k], groups_, grads, values(k));
    filled[k].Notify();  // Even on failure: the thread must not wait.
  };
  if (n > 0) fill(0);
  for (size_t k = 0; k < n; ++k) {
    if (k + 1 < n) fill(k + 1);
    reduced[k].WaitForNotification();
    if (status.ok()) status = reduce_status[k];
    if (status.ok()) status = StepBucket(plan[k], values(k));
    stepped[k].Notify();
  }
  communication.join();
  if (status.ok()) status = communication_failure;
  return status;
}

int64_t ZeroOptimizer::GlobalPosition(size_t group, int index) const {
  int64_t position = index;
  for (size_t g = 0; g < group; ++g) position += groups_[g].params.size();
  return position;
}

int64_t ZeroOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& optimizer : local_) {
    for (size_t i = 0; i < optimizer->parameters().size(); ++i) {
      for (const auto& [name, buffer] : optimizer->state(i).buffers) {
        bytes += static_cast<int64_t>(buffer.byte_size());
      }
    }
  }
  return bytes;
}

int64_t ZeroOptimizer::scratch_bytes() const {
  int64_t bytes = static_cast<int64_t>(broadcast_scratch_.capacity());
  for (const auto& scratch : gradient_scratch_) {
    bytes += static_cast<int64_t>(scratch.capacity() * sizeof(float));
  }
  return bytes;
}

}  // namespace distopt
