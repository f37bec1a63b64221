// OptimizerKind: one functional optimizer's contract (SGD, Adam, ...): its
// hyperparameters and their checks, the per-parameter state it keeps, and
// its update on fp32 values. Kinds are stateless and thread-safe; the state
// lives with the FunctionalOptimizer that uses them.
//
// To add a kind, implement this interface and register it (registry.h),
// from the daemon or from a plugin (plugin_api.h).
#ifndef DISTOPT_SERVER_OPTIM_OPTIMIZER_KIND_H_
#define DISTOPT_SERVER_OPTIM_OPTIMIZER_KIND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/optim/hyperparameters.h"
#include "server/optim/multi_tensor.h"

namespace distopt {

// A per-parameter state tensor, with the value it starts from.
struct StateBufferSpec {
  std::string name;  // As in torch.optim's state: "exp_avg", "sum", ...
  double initial_value = 0;
};

// One parameter's step on a contiguous range of its elements: the update
// reads `grad`, and updates `param` and `buffers` (in StateBuffers order)
// in place. All arrays are fp32 and `count` long.
struct UpdateArgs {
  const Hyperparameters* hyperparameters;
  int64_t step;  // This parameter's step count, 1 on its first step.
  // True when the buffers were created for this step (torch.optim's "state
  // is None" case, which SGD's momentum treats specially).
  bool fresh_buffers;
  float* param;
  const float* grad;
  float* const* buffers;
  int64_t count;
};

class OptimizerKind {
 public:
  virtual ~OptimizerKind() = default;

  virtual const std::vector<HyperparameterSpec>& hyperparameters() const = 0;

  // Range and combination checks beyond what ResolveHyperparameters does,
  // with torch.optim's rules. INVALID_ARGUMENT naming the hyperparameter.
  virtual absl::Status Validate(const Hyperparameters& h) const = 0;

  // The state buffers these hyperparameters need, in state-dict order.
  virtual std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters& h) const = 0;

  // Whether torch.optim keeps a "step" entry in this kind's state (SGD does
  // not).
  virtual bool has_step_state() const { return true; }

  // Whether torch.optim makes the state when the optimizer is created
  // (Adagrad does), rather than at each parameter's first step.
  virtual bool creates_state_eagerly() const { return false; }

  // The elementwise update. Element i's result depends only on element i
  // of every array, so callers may split a tensor into ranges.
  virtual void Update(const UpdateArgs& args) const = 0;

  // Sets the op, flags and scalars of a fused CUDA step over
  // `launch.tensors` (pointers already set), whose step counts after this
  // step are `steps` and whose buffers were just created where `fresh`.
  // Kinds without a CUDA kernel (plugins, unless they add one) keep the
  // default: UNIMPLEMENTED.
  virtual absl::Status PrepareCudaLaunch(const Hyperparameters& h,
                                         const std::vector<int64_t>& steps,
                                         const std::vector<bool>& fresh,
                                         multi_tensor::Launch& launch) const {
    return absl::UnimplementedError(
        "this optimizer kind has no CUDA kernel; expected parameters on cpu");
  }
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_OPTIMIZER_KIND_H_
