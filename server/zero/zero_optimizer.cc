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

// The gradients are reduced where they are only when the parameters
// present average this many bytes or more (see Round).
constexpr int64_t kInPlaceMinAverageBytes = int64_t{256} << 10;

// What the ranks must agree on: the kind, the groups and the options.
SpecificationParts DescribeZero(const OptimizerKind& kind,
                                const std::string& kind_name,
                                const std::vector<ParamGroup>& groups,
                                const ZeroOptions& options,
                                int first_group = 0) {
  SpecificationParts parts =
      DescribeSpecification(kind, kind_name, groups, first_group);
  parts.emplace_back(
      "options", absl::StrCat("parameters_as_bucket_view=",
                              options.parameters_as_bucket_view,
                              " overlap=", options.overlap,
                              " gradient_sharded=", options.gradient_sharded,
                              " bucket_bytes=", options.bucket_bytes));
  return parts;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ZeroOptimizer>> ZeroOptimizer::Create(
    Communicator* communicator, const OptimizerKind* kind,
    const std::string& kind_name, std::vector<ParamGroup> groups,
    const ZeroOptions& options, MemoryBudget* budget) {
  const Device device = communicator->tensors().device();
  absl::StatusOr<std::shared_ptr<Backend>> backend = GetBackend(device);
  absl::Status valid = backend.status();
  if (!valid.ok()) {
    return AgreeOnEveryRank(*communicator, valid, "the parameters and options");
  }
  std::unique_ptr<ZeroOptimizer> zero(new ZeroOptimizer(
      communicator, *backend, kind, kind_name, options, budget));
  valid = CheckFloatingParameters(groups, 0, device);
  if (valid.ok() &&
      options.bucket_bytes < static_cast<int64_t>(sizeof(float))) {
    valid = absl::InvalidArgumentError(
        absl::StrCat("bucket_bytes: ", options.bucket_bytes,
                     "; expected at least one float32 (4 bytes)"));
  }
  valid = AgreeOnEveryRank(*communicator, valid, "the parameters and options");
  if (!valid.ok()) return valid;
  absl::Status same = CheckSameOnEveryRank(
      *communicator, DescribeZero(*kind, kind_name, groups, options));
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
      *communicator_,
      CheckFloatingParameters({group}, groups_.size(), device_->device()),
      "the new group's parameters");
  if (!valid.ok()) return valid;
  absl::Status same = CheckSameOnEveryRank(
      *communicator_,
      DescribeZero(*kind_, kind_name_, {group}, options_, groups_.size()));
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
  return SetHyperparametersOnEveryRank(*communicator_, local_, group, changes);
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
    // Made even when this rank owns none of the group, so that every rank
    // checks the hyperparameters and can report them in a state dict.
    absl::StatusOr<std::unique_ptr<FunctionalOptimizer>> optimizer =
        CreateGroupOptimizer(kind_, added[a], partition->parameters[rank][g], g,
                             device_->device(), budget_);
    if (!optimizer.ok()) return optimizer.status();
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
  steppers_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    GroupStepper& stepper = steppers_[g];
    stepper.optimizer = local_[g].get();
    stepper.params.clear();
    stepper.position.assign(groups_[g].params.size(), -1);
    for (int index : partition_.parameters[rank][g]) {
      stepper.position[index] = static_cast<int>(stepper.params.size());
      stepper.params.push_back(groups_[g].params[index]);
    }
  }
}

absl::Status ZeroOptimizer::Step(const GroupGradientPointers& grads,
                                 const absl::Status& refused) {
  if (!damage_.ok()) return damage_;
  const absl::Status valid =
      refused.ok() ? CheckGradients(groups_, grads) : refused;
  return Round(grads, /*active=*/true, valid).status();
}

absl::StatusOr<bool> ZeroOptimizer::ShadowStep() {
  if (!damage_.ok()) return damage_;
  GroupGradientPointers none(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    none[g].assign(groups_[g].params.size(), nullptr);
  }
  return Round(none, /*active=*/false, absl::OkStatus());
}

absl::StatusOr<bool> ZeroOptimizer::Round(const GroupGradientPointers& grads,
                                          bool active,
                                          const absl::Status& refused) {
  // First, one small all-reduce: which ranks refused the step (each then
  // returns at once, so none waits in a collective the others skip), how
  // many ranks are still active (a joined rank only shadows the others),
  // how many have every gradient in host memory, and how many have a
  // gradient for each parameter. Every rank then plans the same buckets
  // and issues the same collectives.
  const int world = communicator_->size();
  // Its length comes from the groups, the same on every rank, whatever
  // this rank was given (`refused` says when that does not fit).
  std::vector<float> header = RefusalSlots(*communicator_, refused);
  header.push_back(active ? 1.0f : 0.0f);
  // (The tensors' device is the same kind on every rank; each rank still
  // checks its own, and its gradients', so that the ranks' verdicts can
  // only differ in this sum.)
  bool in_host_memory = refused.ok() && device_->device().is_cpu();
  for (size_t g = 0; in_host_memory && g < groups_.size(); ++g) {
    for (const Tensor* grad : grads[g]) {
      if (grad != nullptr && !grad->device().is_cpu()) in_host_memory = false;
    }
  }
  header.push_back(in_host_memory ? 1.0f : 0.0f);
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      header.push_back(refused.ok() && grads[g][i] != nullptr);
    }
  }
  absl::Status status =
      communicator_->AllReduce(absl::MakeSpan(header), ReduceOp::kSum);
  if (!status.ok()) return status;
  status = VerdictOfRefusals(*communicator_,
                             absl::MakeConstSpan(header).subspan(0, world),
                             refused, "the step");
  if (!status.ok()) return status;
  if (header[world] == 0) return false;
  Presence present(groups_.size());
  // Gradient-sharded over host memory, when every rank has an fp32
  // gradient in host memory for every parameter present (the counts say so
  // alike on every rank), the reduce-scatter reads the gradients where
  // they are, and each piece of this rank's block is stepped as it
  // arrives: no copy of them into a bucket, no bucket of averages. Each
  // gradient then travels as messages of its own:
  // for small ones, a copy into one bucket costs less (measured, 200
  // parameters of 4 KiB: 3.7 ms a step copied, 12.7 ms in place). The
  // average decides, so one large parameter may carry small ones along.
  reduce_in_place_ = options_.gradient_sharded &&
                     header[world + 1] == static_cast<float>(world);
  int64_t present_count = 0, present_bytes = 0;
  size_t k = world + 2;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const float holders = header[k++];
      present[g].push_back(holders > 0);
      if (holders == 0) continue;
      ++present_count;
      present_bytes += groups_[g].params[i]->byte_size();
      // A parameter of no elements is in no piece of a reduce-scatter, so
      // it could not count its step there.
      if (holders != static_cast<float>(world) ||
          groups_[g].params[i]->dtype() != DType::kFloat32 ||
          groups_[g].params[i]->num_elements() == 0) {
        reduce_in_place_ = false;
      }
    }
  }
  if (present_bytes < present_count * kInPlaceMinAverageBytes) {
    reduce_in_place_ = false;
  }
  // Gradient-sharded, parameters larger than an owner's share of a bucket
  // are sliced, so that every bucket's reduce-scatter and all-gather move
  // bytes between all ranks at once, not from one owner's block alone.
  // An all-reduce is balanced whatever the bucket holds.
  // The step's gradient scratch stays within bucket_bytes in every mode.
  // Copied, a bucket is the scratch: with overlap, the two buckets in
  // flight take half each. Reduced in place, there is no gradient scratch;
  // sliced plans keep a block to half a bucket (1/W of it while every
  // owner has gradients left, and no more once one has the buckets to
  // itself), so that the ring's chunks (two blocks' worth at most) and at
  // W > 2 its partial sums of two blocks take a bucket at most.
  const int64_t bucket_elements = std::max<int64_t>(
      1, options_.bucket_bytes / static_cast<int64_t>(sizeof(float)) /
             (options_.overlap && !reduce_in_place_ ? 2 : 1));
  const std::vector<GradientBucket> plan = PlanGradientBuckets(
      groups_, partition_.owner, communicator_->size(), present,
      bucket_elements,
      options_.gradient_sharded ? Slicing::kSliced : Slicing::kWhole,
      std::max<int64_t>(1, bucket_elements / 2));
  changing_ = false;
  status = reduce_in_place_   ? ReduceAndStepPiecewise(plan, grads)
           : options_.overlap ? ReduceAndStepOverlapped(plan, grads)
                              : ReduceAndStep(plan, grads);
  // Gradient-sharded, each bucket's parameters were gathered already.
  if (!options_.gradient_sharded && !IsCollectiveFailure(status)) {
    // The owners' parameters land on this rank from here on.
    changing_ = true;
    for (int owner = 0; owner < communicator_->size(); ++owner) {
      absl::Status sent =
          BroadcastFromOwner(*tensors_, groups_, partition_, present, owner,
                             options_.parameters_as_bucket_view,
                             options_.bucket_bytes, &broadcast_scratch_);
      if (!sent.ok()) {
        status = sent;
        break;
      }
    }
  }
  // A rank that failed on its own (not in a collective) took part in every
  // collective with zeros for its gradients: every rank learns of it here,
  // so that none returns OK with a model that rank spoiled.
  if (!IsCollectiveFailure(status)) {
    status = AgreeOnEveryRank(
        *communicator_, status, "the step",
        "it went on through the step's collectives (with zeros where its "
        "gradients could not be taken), so no rank's step is "
        "whole");
  }
  communicator_kept_bytes_ = tensors_->kept_bytes();
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
  // average, in the block's place. Otherwise every rank gets every
  // average (ZeRO-1, as torch).
  return options_.gradient_sharded
             ? tensors_->ReduceScatterBlocks(values, bucket.blocks,
                                             ReduceOp::kAverage)
             : tensors_->AllReduce(values, ReduceOp::kAverage);
}

absl::Status ZeroOptimizer::GatherStepped(const GradientBucket& bucket) {
  if (!options_.gradient_sharded) return absl::OkStatus();
  // Other owners' parameters land on this rank.
  changing_ = true;
  return GatherBucketParameters(*tensors_, bucket, groups_);
}

// A failure of this rank's own (filling or stepping a bucket) does not stop
// it: it goes on through every collective with zeros for its gradients, so
// that no other rank waits for it, and Round makes every rank report it.
absl::Status ZeroOptimizer::ReduceAndStep(
    const std::vector<GradientBucket>& plan,
    const GroupGradientPointers& grads) {
  absl::StatusOr<absl::Span<float>> scratch =
      gradient_scratch_[0].Elements<float>(LargestBucket(plan));
  // Without room for a bucket this rank cannot take part: its peers' next
  // collective times out and the round breaks, as with a lost peer.
  if (!scratch.ok()) return AsCollectiveFailure(scratch.status());
  absl::Status local;
  for (size_t k = 0; k < plan.size(); ++k) {
    const GradientBucket& bucket = plan[k];
    absl::Span<float> values = scratch->subspan(0, bucket.size);
    if (local.ok()) local = FillBucket(bucket, grads, values, *device_);
    if (!local.ok()) ZeroFill(values);
    absl::Status status = Reduce(bucket, values);
    if (!status.ok()) return status;
    if (local.ok()) {
      local = StepBucket(bucket, groups_, values, steppers_, &narrowed_scratch_,
                         &changing_);
    }
    status = GatherStepped(bucket);
    if (!status.ok()) return status;
  }
  return local;
}

// Two bucket buffers: while a communication thread reduces bucket k + 1,
// this thread steps bucket k (and fills the next). The first bucket is
// stepped as soon as it is reduced, from the first step on. Gradient-
// sharded, once this thread has stepped bucket k, the communication thread
// (after reducing k + 1) gathers bucket k's parameters and slices, straight
// between the parameters' tensors. A local
// failure goes on with zeros, as in ReduceAndStep; a collective's stops
// the thread's collectives, and every waiter is still notified.
absl::Status ZeroOptimizer::ReduceAndStepOverlapped(
    const std::vector<GradientBucket>& plan,
    const GroupGradientPointers& grads) {
  const size_t n = plan.size();
  const bool gather = options_.gradient_sharded;
  const int64_t largest = LargestBucket(plan);
  absl::Span<float> scratch[2];
  for (int b = 0; b < 2; ++b) {
    absl::StatusOr<absl::Span<float>> reserved =
        gradient_scratch_[b].Elements<float>(largest);
    // As in ReduceAndStep.
    if (!reserved.ok()) return AsCollectiveFailure(reserved.status());
    scratch[b] = *reserved;
  }
  auto values = [&](size_t k) {
    return scratch[k % 2].subspan(0, plan[k].size);
  };
  std::vector<absl::Notification> filled(n), reduced(n), stepped(n);
  // The thread's first collective failure (read once it is joined), and
  // what it was when bucket k had been reduced.
  absl::Status collective;
  std::vector<absl::Status> reduce_status(n);
  std::thread communication([&] {
    for (size_t k = 0; k <= n; ++k) {
      if (k < n) {
        filled[k].WaitForNotification();
        if (collective.ok()) collective = Reduce(plan[k], values(k));
        reduce_status[k] = collective;
        reduced[k].Notify();
      }
      if (gather && k > 0) {
        stepped[k - 1].WaitForNotification();
        if (collective.ok()) collective = GatherStepped(plan[k - 1]);
      }
    }
  });
  absl::Status local;
  auto fill = [&](size_t k) {
    if (local.ok()) local = FillBucket(plan[k], grads, values(k), *device_);
    if (!local.ok()) ZeroFill(values(k));
    filled[k].Notify();
  };
  if (n > 0) fill(0);
  for (size_t k = 0; k < n; ++k) {
    if (k + 1 < n) fill(k + 1);
    reduced[k].WaitForNotification();
    if (local.ok() && reduce_status[k].ok()) {
      local = StepBucket(plan[k], groups_, values(k), steppers_,
                         &narrowed_scratch_, &changing_);
    }
    stepped[k].Notify();
  }
  communication.join();
  return collective.ok() ? local : collective;
}

// The step runs inside the reduce-scatter, a piece (a ring chunk, 1 MiB)
// at a time as its average arrives: its gradient is read while in cache,
// and the ring receives the next pieces while one is stepped. So
// there is nothing for overlap's second thread to do (the gather of one
// bucket and the reduction of the next share the communicator), and no
// bucket of averages. A local failure goes on through every collective,
// as in ReduceAndStep (the gradients sent are this rank's own).
absl::Status ZeroOptimizer::ReduceAndStepPiecewise(
    const std::vector<GradientBucket>& plan,
    const GroupGradientPointers& grads) {
  absl::Status local;
  for (const GradientBucket& bucket : plan) {
    const int64_t block_begin = BlockBegin(bucket, tensors_->rank());
    size_t next_entry = 0;
    absl::Status status = tensors_->ReduceScatterSegmentsPiecewise(
        GradientSpans(bucket, grads), ReduceOp::kAverage,
        [&](size_t at, absl::Span<const float> averages) {
          if (!local.ok()) return;
          local = StepReducedPiece(
              bucket, groups_, block_begin + static_cast<int64_t>(at), averages,
              steppers_, &next_entry, &changing_);
        });
    if (!status.ok()) return status;
    status = GatherStepped(bucket);
    if (!status.ok()) return status;
  }
  return local;
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
  int64_t bytes = static_cast<int64_t>(broadcast_scratch_.capacity() +
                                       narrowed_scratch_.capacity()) +
                  communicator_kept_bytes_;
  for (const auto& scratch : gradient_scratch_) {
    bytes += static_cast<int64_t>(scratch.capacity());
  }
  return bytes;
}

void ZeroOptimizer::ZeroFill(absl::Span<float> values) {
  // Best effort: a device that failed the fill has failed the step already.
  device_->Fill(values.data(), DType::kFloat32, values.size(), 0.0)
      .IgnoreError();
}

}  // namespace distopt
