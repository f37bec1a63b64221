#include "server/zero/zero_optimizer.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "server/data_parallel/collective_hyperparameters.h"
#include "server/zero/parameter_broadcast.h"

namespace distopt {
namespace {

// What the ranks must agree on: the kind, the groups and the options.
SpecificationParts DescribeZero(const std::string& kind_name,
                                const std::vector<ParamGroup>& groups,
                                const ZeroOptions& options,
                                int first_group = 0) {
  SpecificationParts parts =
      DescribeSpecification(kind_name, groups, first_group);
  parts.emplace_back("options", absl::StrCat("parameters_as_bucket_view=",
                                             options.parameters_as_bucket_view,
                                             " overlap=", options.overlap));
  return parts;
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
  // somewhere. Every rank then issues the same collectives.
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
  GradientBuckets buckets(groups_, partition_.owner, communicator_->size(),
                          present, &gradient_storage_);
  status = buckets.Fill(grads);
  if (!status.ok()) return status;
  changing_ = false;
  status = options_.overlap ? OverlappedAverageStepAndSend(buckets, present)
                            : AverageStepAndSend(buckets, present);
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

absl::Status ZeroOptimizer::StepPartition(GradientBuckets& buckets,
                                          const Presence& present) {
  changing_ = true;
  const int rank = communicator_->rank();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<int>& mine = partition_.parameters[rank][g];
    if (mine.empty()) continue;
    std::vector<Tensor*> params;
    std::vector<std::optional<Tensor>> averaged(mine.size());
    std::vector<const Tensor*> grads;
    for (size_t j = 0; j < mine.size(); ++j) {
      params.push_back(groups_[g].params[mine[j]]);
      if (present[g][mine[j]]) {
        absl::StatusOr<Tensor> gradient = buckets.Gradient(g, mine[j]);
        if (!gradient.ok()) return gradient.status();
        averaged[j] = *std::move(gradient);
      }
      grads.push_back(averaged[j].has_value() ? &*averaged[j] : nullptr);
    }
    absl::Status status = local_[g]->Step(params, grads);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status ZeroOptimizer::AverageStepAndSend(GradientBuckets& buckets,
                                               const Presence& present) {
  if (!buckets.all().empty()) {
    absl::Status status =
        communicator_->AllReduce(buckets.all(), ReduceOp::kAverage);
    if (!status.ok()) return status;
  }
  absl::Status status = StepPartition(buckets, present);
  if (!status.ok()) return status;
  for (int owner = 0; owner < communicator_->size(); ++owner) {
    status = BroadcastFromOwner(*communicator_, groups_, partition_, present,
                                owner, options_.parameters_as_bucket_view,
                                &bucket_scratch_);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// A communication thread reduces the owners' buckets in rank order, then
// sends each owner's parameters; this thread steps as soon as its own
// bucket is reduced, while later buckets are still in flight.
absl::Status ZeroOptimizer::OverlappedAverageStepAndSend(
    GradientBuckets& buckets, const Presence& present) {
  const int size = communicator_->size();
  const int rank = communicator_->rank();
  std::vector<absl::Notification> reduced(size);
  std::vector<absl::Status> reduce_status(size);
  absl::Notification stepped;
  absl::Status step_status;
  absl::Status send_status;
  std::thread communication([&] {
    absl::Status failure;
    for (int owner = 0; owner < size; ++owner) {
      if (failure.ok() && !buckets.bucket(owner).empty()) {
        failure =
            communicator_->AllReduce(buckets.bucket(owner), ReduceOp::kAverage);
      }
      reduce_status[owner] = failure;
      reduced[owner].Notify();
    }
    if (!failure.ok()) {
      send_status = failure;
      return;
    }
    for (int owner = 0; owner < size; ++owner) {
      if (owner == rank) {
        stepped.WaitForNotification();
        if (!step_status.ok()) return;
      }
      send_status = BroadcastFromOwner(
          *communicator_, groups_, partition_, present, owner,
          options_.parameters_as_bucket_view, &bucket_scratch_);
      if (!send_status.ok()) return;
    }
  });
  reduced[rank].WaitForNotification();
  step_status = reduce_status[rank].ok() ? StepPartition(buckets, present)
                                         : reduce_status[rank];
  stepped.Notify();
  communication.join();
  return step_status.ok() ? send_status : step_status;
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

}  // namespace distopt
