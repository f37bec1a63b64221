// ZeroOptimizer: ZeRO over a Communicator, as torch's
// ZeroRedundancyOptimizer (ZeRO-1), or gradient-sharded (ZeRO-2, see
// ZeroOptions). Every rank holds the full model; optimizer state is kept
// only for this rank's partition (partition.h). A step averages the
// gradients across ranks in fp32 bucket by bucket (the job DDP does;
// gradient_buckets.h), steps this rank's parameters, then each owner's
// parameters reach all ranks (parameter_broadcast.h, or, gradient-sharded,
// parameter_gather.h), so all ranks end equal. Parameters may mix float32,
// float16 and bfloat16 (torch requires one dtype).
//
// All ranks call every method except the accessors together, with the same
// arguments where they are shared (collectives pair up by order). Not
// thread-safe.
#ifndef DISTOPT_SERVER_ZERO_ZERO_OPTIMIZER_H_
#define DISTOPT_SERVER_ZERO_ZERO_OPTIMIZER_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/device_buffer.h"
#include "server/comm/communicator.h"
#include "server/data_parallel/gradient_buckets.h"
#include "server/data_parallel/param_groups.h"
#include "server/optim/functional_optimizer.h"
#include "server/zero/partition.h"

namespace distopt {

struct ZeroOptions {
  // Parameters reach the other ranks through one flat bucket per (owner
  // rank, dtype) instead of one broadcast per parameter, small ones packed
  // (no effect when gradient_sharded: parameters are gathered in the
  // gradients' buckets).
  bool parameters_as_bucket_view = false;
  // Gradients are reduced bucket by bucket on a communication thread, so a
  // rank steps the parameters of one bucket while the next is reduced.
  // (Gradient-sharded with fp32 gradients in host memory, reduced where
  // they are, each piece of a rank's block is stepped inside the
  // reduce-scatter as it arrives: nothing is left to overlap, and the
  // option changes nothing.)
  bool overlap = false;
  // Gradient-sharded (ZeRO-2, the layout of Megatron's distributed
  // optimizer): gradients are reduce-scattered, each rank receiving only
  // its own parameters' averages, instead of all-reduced, and the stepped
  // parameters all-gathered bucket by bucket instead of broadcast by their
  // owners: 2(W-1)/W of the model's bytes per rank instead of 3(W-1)/W.
  // Torch's parameter-boundary partition is kept rather than flat
  // contiguous shards: every parameter's state stays whole on one rank, so
  // the local optimizers, state dicts (and their resharding across world
  // sizes) and Join are those of ZeRO-1. The cost, uneven blocks, is
  // bounded: each bucket takes an equal share from every rank, a parameter
  // larger than a share being sliced across buckets and stepped slice by
  // slice by its owner (the kinds' updates are elementwise:
  // FunctionalOptimizer::StepSlice), with no buffer of its size.
  bool gradient_sharded = false;
  // Gradients are reduced and parameters sent in buckets of at most this
  // many bytes, as DDP's bucket_cap_mb: the step's scratch is bounded by
  // it, not by the model (a parameter larger than a bucket goes in a
  // bucket of its own, or, gradient-sharded, is sliced). With overlap the
  // two gradient buckets in flight share it, half each (reduced where the
  // gradients are, there is no gradient scratch: the buckets keep their
  // size).
  int64_t bucket_bytes = kDefaultBucketBytes;
};

class ZeroOptimizer {
 public:
  // `communicator` (and `budget`, where this rank's optimizer state is
  // reserved; null for none) must outlive the optimizer. Gradients and
  // parameters go through its tensors() communicator, on whose device the
  // parameters must be (host memory, or this rank's GPU: the buckets, the
  // optimizer's state and its step stay there); the rest through it.
  // INVALID_ARGUMENT for parameters that are not float32, float16 or
  // bfloat16 or not on that device, or bad hyperparameters;
  // FAILED_PRECONDITION on every rank, saying what differs, when the ranks
  // were not given the same specification.
  static absl::StatusOr<std::unique_ptr<ZeroOptimizer>> Create(
      Communicator* communicator, const OptimizerKind* kind,
      const std::string& kind_name, std::vector<ParamGroup> groups,
      const ZeroOptions& options = {}, MemoryBudget* budget = nullptr);

  // grads[g][i] for params[g][i] (the parameter's dtype and shape; null
  // when this rank has none). A parameter with a gradient on any rank is
  // averaged with zeros for the ranks without one, as DDP does; one with
  // none anywhere is skipped. Errors of the collectives (a lost rank) come
  // back as they are. A rank whose `refused` is not OK (its caller's checks
  // failed: no such context), or whose gradients do not fit, takes part in
  // the step's first collective only: every rank then returns at once,
  // having changed nothing; that rank its own error, the others
  // FAILED_PRECONDITION naming it.
  absl::Status Step(const GroupGradientPointers& grads,
                    const absl::Status& refused = absl::OkStatus());

  // For a rank that has run out of data (torch's Join): takes part in the
  // other ranks' next step with no gradients (counting as zeros) and still
  // steps and sends its own partition. False, having done nothing, once
  // every rank has joined.
  absl::StatusOr<bool> ShadowStep();

  // Collective, as torch's add_param_group: the new group is partitioned
  // after the others (whose owners do not change), and this rank makes
  // state for its share of it. FAILED_PRECONDITION on every rank when the
  // ranks' groups differ.
  absl::Status AddParamGroup(ParamGroup group);

  // Collective: changes group `group`'s hyperparameters on every rank (an
  // LR schedule), as setting torch's param_groups[group] does before a
  // step. See SetHyperparametersOnEveryRank.
  absl::Status SetHyperparameters(
      int group, const absl::flat_hash_map<std::string, HyperValue>& changes);

  // Collective, as torch's consolidate_state_dict(to) + state_dict(): rank
  // `to` receives every rank's shard into host memory and returns the
  // unsharded state dict in torch's layout (state keyed by global position:
  // groups in order, parameters in order within each); the other ranks
  // return nullopt.
  absl::StatusOr<std::optional<OptimizerStateDict>> ConsolidateStateDict(
      int to);
  // This rank's shard of the state, at global positions (what
  // ConsolidateStateDict gathers from it): for its checkpoint.
  absl::StatusOr<OptimizerStateDict> ShardStateDict() const;
  // Collective: every rank passes the same unsharded state dict (from any
  // world size) and keeps its partition's share. All or nothing across
  // ranks: when any rank refuses it, none changes, and every rank returns
  // an error (INVALID_ARGUMENT on the refusing rank naming the field). A
  // caller that found the dict unusable passes its error, which refuses it
  // the same way. The ranks' parameters must be identical
  // (FAILED_PRECONDITION naming one that differs otherwise); a damaged
  // optimizer is whole again once it succeeds.
  //
  // Which dict each rank is given: the same whole dict (a user's load:
  // every rank checks the others were given it too, FAILED_PRECONDITION
  // otherwise), or each rank its own shard (a resume from the ranks'
  // checkpoints).
  enum class Given { kTheSameOnEveryRank, kEachRankItsOwnShard };
  absl::Status LoadStateDict(
      const absl::StatusOr<OptimizerStateDict>& state_dict, Given given);

  // OK while the ranks' parameters and state are whole; after a step that
  // failed half-way, FAILED_PRECONDITION saying how to recover, and Step
  // and ShadowStep return it until LoadStateDict succeeds on every rank.
  const absl::Status& damage() const { return damage_; }

  const ZeroPartition& partition() const { return partition_; }
  const ZeroOptions& options() const { return options_; }
  // Bytes of optimizer state this rank holds.
  int64_t state_bytes() const;
  // Bytes of the step's scratch buffers, kept between steps, with what the
  // tensors' communicator keeps for the step's collectives (as of the last
  // step): bounded by the bucket size (or the largest parameter), not by
  // the model.
  int64_t scratch_bytes() const;

 private:
  ZeroOptimizer(Communicator* communicator, std::shared_ptr<Backend> device,
                const OptimizerKind* kind, std::string kind_name,
                const ZeroOptions& options, MemoryBudget* budget)
      : communicator_(communicator),
        tensors_(&communicator->tensors()),
        device_(device),
        kind_(kind),
        kind_name_(std::move(kind_name)),
        options_(options),
        budget_(budget),
        gradient_scratch_{DeviceBuffer(device), DeviceBuffer(device)},
        narrowed_scratch_(device),
        broadcast_scratch_(device) {}

  // Groups added to the optimizer: the partition with them and this
  // rank's optimizers for them (their state reserved in the budget).
  // Prepared on every rank first, kept only once every rank could prepare
  // it.
  struct Extension {
    ZeroPartition partition;
    std::vector<std::unique_ptr<FunctionalOptimizer>> optimizers;
  };
  absl::StatusOr<Extension> PrepareExtension(
      const std::vector<ParamGroup>& added) const;
  void Extend(std::vector<ParamGroup> added, Extension extension);
  // One step round; false when no rank was active.
  absl::StatusOr<bool> Round(const GroupGradientPointers& grads, bool active,
                             const absl::Status& refused);
  // Averages one bucket across ranks in `values`: every rank all of it
  // (ZeRO-1), or gradient-sharded its own block.
  absl::Status Reduce(const GradientBucket& bucket, absl::Span<float> values);
  // Gradient-sharded: the parameters (and slices) of a bucket every owner
  // has stepped reach every rank from their owners (nothing otherwise).
  absl::Status GatherStepped(const GradientBucket& bucket);
  absl::Status ReduceAndStep(const std::vector<GradientBucket>& plan,
                             const GroupGradientPointers& grads);
  absl::Status ReduceAndStepOverlapped(const std::vector<GradientBucket>& plan,
                                       const GroupGradientPointers& grads);
  // Gradient-sharded, reduced from the gradients where they are: each
  // piece of this rank's block is stepped as the reduce-scatter completes
  // it, then the bucket gathered.
  absl::Status ReduceAndStepPiecewise(const std::vector<GradientBucket>& plan,
                                      const GroupGradientPointers& grads);
  // Zeros where this rank's gradients could not be taken, so that it still
  // takes part in the bucket's collective.
  void ZeroFill(absl::Span<float> values);
  // Global positions of this rank's parameters, per group, in the local
  // optimizers' order.
  std::vector<std::vector<int64_t>> HeldPositions() const;
  absl::Status CheckStateFitsParameters(const OptimizerStateDict& dict) const;
  // A digest of each parameter's values, for CheckSameOnEveryRank.
  SpecificationParts DescribeValues() const;

  // The control collectives (host memory) and the tensors' (the
  // parameters' device); the same communicator for a group over host memory.
  Communicator* const communicator_;
  Communicator* const tensors_;
  const std::shared_ptr<Backend> device_;
  const OptimizerKind* const kind_;
  const std::string kind_name_;
  const ZeroOptions options_;
  // Where this rank's optimizers reserve their state.
  MemoryBudget* const budget_;
  // As created: the local optimizers hold the current hyperparameters.
  std::vector<ParamGroup> groups_;
  ZeroPartition partition_;
  // Per group: the optimizer over this rank's parameters of the group (null
  // when it owns none), in partition order.
  std::vector<std::unique_ptr<FunctionalOptimizer>> local_;
  // Per group: local_[g], this rank's parameters of it, and where each of
  // the group's parameters is among them (-1 when another rank owns it).
  std::vector<GroupStepper> steppers_;
  // On the parameters' device, kept from step to step (a fresh buffer costs
  // its allocation on every step), each bounded by the bucket size: the
  // gradient bucket (two, of half the size, for overlap; none when the
  // gradients are reduced where they are), a bucket's
  // fp16/bf16 averages, and the parameter bucket the owners broadcast (the
  // bucket view's, or small parameters packed, at most 1 MiB, without it).
  DeviceBuffer gradient_scratch_[2];
  DeviceBuffer narrowed_scratch_;
  DeviceBuffer broadcast_scratch_;
  // This round reduces the gradients where they are (set by Round before
  // any bucket, the same on every rank).
  bool reduce_in_place_ = false;
  // Set when a step begins changing this rank's parameters (by stepping
  // them, or by receiving other owners'; from either thread).
  std::atomic<bool> changing_{false};
  // tensors_->kept_bytes() after the last step (read where the collectives
  // run, not from a status call).
  int64_t communicator_kept_bytes_ = 0;
  absl::Status damage_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_ZERO_ZERO_OPTIMIZER_H_
