// LocalSgdOptimizer: torch's PostLocalSGDOptimizer with the gradient
// reduction of its post_localSGD_hook, across the ranks of a group. Each
// step:
//   1. the ranks check that they are at the same step and agree on which
//      parameters have a gradient anywhere;
//   2. gradients are averaged (fp32) over the whole group before
//      `start_localsgd_iter`, afterwards within subgroups of
//      `subgroup_size` ranks, or not at all;
//   3. every rank steps its own optimizer over the whole model;
//   4. the averager (model_averager.h) decides whether this step averages
//      the parameters, and within groups of how many ranks: the parameters
//      that had a gradient on some rank are averaged (fp32 accumulation).
// All ranks call Create and Step together. Not thread-safe.
#ifndef DISTOPT_SERVER_LOCALSGD_LOCAL_SGD_OPTIMIZER_H_
#define DISTOPT_SERVER_LOCALSGD_LOCAL_SGD_OPTIMIZER_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/device_buffer.h"
#include "server/comm/communicator_group.h"
#include "server/data_parallel/gradient_buckets.h"
#include "server/data_parallel/param_groups.h"
#include "server/localsgd/model_averager.h"
#include "server/optim/functional_optimizer.h"

namespace distopt {

struct LocalSgdOptions {
  AveragerSpec averager;
  int64_t start_localsgd_iter = 0;
  // After start_localsgd_iter: average gradients within subgroups of this
  // many ranks (the ranks of one node), or, when false, not at all.
  bool post_local_gradient_allreduce = true;
  int subgroup_size = 1;
  // Gradients are reduced, and parameters averaged, in buckets of at most
  // this many bytes (DDP's bucket_cap_mb): the step's scratch.
  int64_t bucket_bytes = kDefaultBucketBytes;
};

class LocalSgdOptimizer {
 public:
  // INVALID_ARGUMENT for bad parameters, hyperparameters, averager or
  // subgroup size; FAILED_PRECONDITION on every rank, saying what differs,
  // when the ranks' specifications differ. `warnings` gets what torch
  // warns about (period 1; start_localsgd_iter not the warm-up).
  // The local optimizers' state is reserved whole in `budget` (null for
  // none; it must outlive the optimizer): RESOURCE_EXHAUSTED on every rank
  // when it does not fit on one.
  static absl::StatusOr<std::unique_ptr<LocalSgdOptimizer>> Create(
      CommunicatorGroup& group, const OptimizerKind* kind,
      const std::string& kind_name, std::vector<ParamGroup> groups,
      const LocalSgdOptions& options, std::vector<std::string>* warnings,
      MemoryBudget* budget = nullptr);

  // grads[g][i] for params[g][i] (null when this rank has none). A rank
  // whose `refused` is not OK (its caller's checks failed: no such
  // context), or whose gradients do not fit, takes part in the step's first
  // collective only: every rank then returns at once, having changed
  // nothing; that rank its own error, the others FAILED_PRECONDITION
  // naming it.
  absl::Status Step(CommunicatorGroup& group,
                    const GroupGradientPointers& grads,
                    const absl::Status& refused = absl::OkStatus());

  // Collective over the whole group: changes group `group`'s
  // hyperparameters on every rank (an LR schedule).
  absl::Status SetHyperparameters(
      CommunicatorGroup& group, int index,
      const absl::flat_hash_map<std::string, HyperValue>& changes);

  // The local optimizer's state, keyed by global position (groups in
  // order), and the averager's step.
  absl::StatusOr<OptimizerStateDict> StateDict() const;
  int64_t step() const { return averager_.step(); }
  // Replaces the local optimizer's state and the averager's step (0, with a
  // warning, when `step` is absent). Local to this rank; the next Step
  // checks that all ranks are at the same step. All or nothing.
  absl::Status LoadStateDict(const OptimizerStateDict& state_dict,
                             std::optional<int64_t> step,
                             std::vector<std::string>* warnings);

  // OK while this rank's step is whole; after a step that failed
  // half-way, FAILED_PRECONDITION saying how to recover, and Step returns it
  // until LoadStateDict succeeds.
  const absl::Status& damage() const { return damage_; }

  const ModelAverager& averager() const { return averager_; }
  const LocalSgdOptions& options() const { return options_; }
  // Bytes of the step's scratch buffers, kept between steps: bounded by
  // options().bucket_bytes, not by the model.
  int64_t scratch_bytes() const {
    return static_cast<int64_t>(gradient_storage_.capacity() +
                                narrowed_storage_.capacity() +
                                average_storage_.capacity());
  }
  int world_size() const { return world_size_; }

 private:
  LocalSgdOptimizer(std::string kind_name, std::vector<ParamGroup> groups,
                    std::vector<std::unique_ptr<FunctionalOptimizer>> local,
                    ModelAverager averager, const LocalSgdOptions& options,
                    int world_size, std::shared_ptr<Backend> device)
      : kind_name_(std::move(kind_name)),
        groups_(std::move(groups)),
        local_(std::move(local)),
        averager_(std::move(averager)),
        options_(options),
        world_size_(world_size),
        device_(device),
        gradient_storage_(device),
        narrowed_storage_(device),
        average_storage_(device) {
    // This rank steps every parameter of every group.
    for (size_t g = 0; g < groups_.size(); ++g) {
      GroupStepper stepper{local_[g].get(), groups_[g].params, {}};
      for (size_t i = 0; i < groups_[g].params.size(); ++i) {
        stepper.position.push_back(static_cast<int>(i));
      }
      steppers_.push_back(std::move(stepper));
    }
  }

  absl::Status StepOnce(CommunicatorGroup& group,
                        const GroupGradientPointers& grads,
                        const absl::Status& refused);
  // Which communicator reduces the gradients at this step; null for none.
  absl::StatusOr<Communicator*> GradientReducer(CommunicatorGroup& group);

  const std::string kind_name_;
  std::vector<ParamGroup> groups_;
  std::vector<std::unique_ptr<FunctionalOptimizer>> local_;  // Per group.
  std::vector<GroupStepper> steppers_;  // Over local_, every parameter.
  ModelAverager averager_;
  const LocalSgdOptions options_;
  const int world_size_;
  // Where the parameters live (host memory or this rank's GPU), and the
  // step's scratch there.
  const std::shared_ptr<Backend> device_;
  DeviceBuffer gradient_storage_;
  DeviceBuffer narrowed_storage_;  // fp16/bf16 averages of a bucket.
  DeviceBuffer average_storage_;
  // Set when a step begins changing this rank's parameters.
  std::atomic<bool> changing_{false};
  absl::Status damage_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_LOCALSGD_LOCAL_SGD_OPTIMIZER_H_
