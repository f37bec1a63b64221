// FunctionalOptimizer: one optimizer kind, its hyperparameters and the
// per-parameter state, over an ordered list of parameters (a param group of
// torch.optim), all on one device. It updates the tensors in place: on the
// CPU with the kind's loops split across a thread pool, on a GPU with one
// fused multi-tensor launch per dtype. fp16 and bf16 parameters are updated
// in fp32 and rounded to nearest even; all state is fp32 on the device.
//
// A parameter without a gradient in a step is skipped: its step count stays
// and no state is made for it (except for kinds that, like torch's Adagrad,
// make all state when the optimizer is created). Every input is checked before
// anything changes, so a refused step changes nothing. Not thread-safe: the
// caller serialises steps (the daemon does so per parameter set).
#ifndef DISTOPT_SERVER_OPTIM_FUNCTIONAL_OPTIMIZER_H_
#define DISTOPT_SERVER_OPTIM_FUNCTIONAL_OPTIMIZER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/memory_budget.h"
#include "common/shape.h"
#include "common/tensor.h"
#include "server/optim/hyperparameters.h"
#include "server/optim/optimizer_kind.h"

namespace distopt {

struct ParameterLayout {
  DType dtype = DType::kFloat32;
  Shape shape;
};

// One parameter's optimizer state; empty until its first step.
struct ParameterState {
  int64_t step = 0;
  // fp32 host tensors, in the kind's StateBuffers order.
  std::vector<std::pair<std::string, Tensor>> buffers;
};

// torch.optim's state_dict() of one optimizer: one param group covering
// positions 0..n-1, and the state of the parameters that have some.
struct OptimizerStateDict {
  struct ParamGroup {
    absl::flat_hash_map<std::string, HyperValue> hyperparameters;
    std::vector<int64_t> params;
  };
  struct Entry {
    std::optional<int64_t> step;  // Absent for kinds without one (SGD).
    std::vector<std::pair<std::string, Tensor>> buffers;
  };
  std::string kind;
  std::vector<ParamGroup> param_groups;
  std::map<int64_t, Entry> state;
};

class FunctionalOptimizer {
 public:
  // INVALID_ARGUMENT for bad hyperparameters (naming them) or a parameter
  // that is not floating point.
  // FAILED_PRECONDITION when `device` is unavailable.
  //
  // The state the optimizer will hold once every parameter has been
  // stepped (see MaxStateBytes) is reserved in
  // `budget` (null: none; it must outlive the optimizer), whole, at
  // creation, and grown before hyperparameters or a loaded state dict need
  // more: RESOURCE_EXHAUSTED then, and nothing changes.
  static absl::StatusOr<std::unique_ptr<FunctionalOptimizer>> Create(
      const OptimizerKind* kind,
      const absl::flat_hash_map<std::string, HyperValue>& hyperparameters,
      std::vector<ParameterLayout> parameters, Device device = Device::Cpu(),
      MemoryBudget* budget = nullptr);

  // Updates params[i] with grads[i]; a null gradient skips that parameter.
  // INVALID_ARGUMENT naming "params[i]" or "grads[i]" when a tensor does not
  // match its layout.
  absl::Status Step(absl::Span<Tensor* const> params,
                    absl::Span<const Tensor* const> grads);

  // Updates elements [begin, begin + grad.num_elements()) of params[index]
  // (the tensor, whole) with `grad`, a slice of its gradient in the
  // parameter's dtype: one step of a parameter cut across the buckets of a
  // data-parallel step, or across the pieces a reduce-scatter hands over,
  // taken slice by slice as each slice's gradient is ready, so that nobody
  // puts the gradient together first. The kinds'
  // updates are elementwise (OptimizerKind::Update), so slices stepped in
  // turn give what one Step gives. The slice from element 0 starts the
  // step (its state is made and its count goes up, as Step does); the
  // next must start where the last ended, with no SetHyperparameters or
  // LoadStateDict in between. INVALID_ARGUMENT naming "params[index]" or
  // "grads[index]" for a tensor or range that does not fit;
  // FAILED_PRECONDITION for a slice out of turn. A refused slice changes
  // nothing, but a step left unfinished leaves the parameter torn (its
  // first slices stepped, its count up, the rest not), and so does a
  // StateDict taken meanwhile: the caller recovers it (a ZeRO rank marks
  // itself damaged until a state dict is loaded).
  absl::Status StepSlice(size_t index, Tensor& param, int64_t begin,
                         const Tensor& grad);

  // Changes some hyperparameters (an LR schedule); all or nothing.
  absl::Status SetHyperparameters(
      const absl::flat_hash_map<std::string, HyperValue>& changes);

  // A deep copy of the state, named `kind_name` (the registry's name). The
  // host tensors of `recycled` (an earlier copy) are copied into where
  // their names and shapes still fit, rather than new ones allocated.
  absl::StatusOr<OptimizerStateDict> StateDict(
      const std::string& kind_name, OptimizerStateDict recycled = {}) const;
  // Replaces hyperparameters and state. INVALID_ARGUMENT naming the field
  // when the kind, the number of groups or parameters, a position, a buffer
  // name or shape does not fit; the old state then stays.
  absl::Status LoadStateDict(const std::string& kind_name,
                             const OptimizerStateDict& state_dict);
  // The same, taking over the dict's buffers where they are already on the
  // optimizer's device (a restore does not hold the state twice).
  absl::Status LoadStateDict(const std::string& kind_name,
                             OptimizerStateDict&& state_dict);

  const Hyperparameters& hyperparameters() const { return hyperparameters_; }
  const OptimizerKind& kind() const { return *kind_; }
  const std::vector<ParameterLayout>& parameters() const { return layouts_; }
  Device device() const { return backend_->device(); }
  const ParameterState& state(size_t index) const { return states_[index]; }

 private:
  FunctionalOptimizer(const OptimizerKind* kind, Hyperparameters h,
                      std::vector<ParameterLayout> layouts,
                      std::shared_ptr<Backend> backend, MemoryBudget* budget);

  // The bytes of state held once every parameter has been stepped with
  // `h`: what the optimizer reserves in its budget, so that running out
  // shows at creation rather than in the middle of a step.
  uint64_t MaxStateBytes(const Hyperparameters& h) const;
  // Grows (or shrinks) the state's reservation for hyperparameters `h`.
  absl::Status ReserveStateFor(const Hyperparameters& h);
  absl::Status Load(const std::string& kind_name,
                    const OptimizerStateDict& state_dict, bool adopt);
  // INVALID_ARGUMENT naming "params[index]" when `param` does not match
  // its layout or the optimizer's device.
  absl::Status CheckParameter(size_t index, const Tensor& param) const;
  absl::Status CheckInputs(absl::Span<Tensor* const> params,
                           absl::Span<const Tensor* const> grads) const;
  // Creates missing buffers; true if any was created.
  absl::StatusOr<bool> EnsureBuffers(size_t index);
  // Parameter `index`'s step count goes up (its buffers made already), and
  // a step of its left unfinished slice by slice is over.
  void CountStep(size_t index);
  // Elements [begin, begin + count) of one parameter, its gradient's
  // slice at `grad`.
  struct Range {
    size_t index = 0;
    void* param = nullptr;       // Element 0 of the parameter.
    const void* grad = nullptr;  // Element `begin` of the gradient.
    int64_t begin = 0;
    int64_t count = 0;
    bool fresh = false;
  };
  void UpdateOnCpu(const Range& range);
  // One fused launch per dtype.
  absl::Status UpdateOnCuda(const std::vector<Range>& ranges);
  absl::Status Update(const std::vector<Range>& ranges);

  const OptimizerKind* const kind_;
  Hyperparameters hyperparameters_;
  const std::vector<ParameterLayout> layouts_;
  const std::shared_ptr<Backend> backend_;
  MemoryBudget* const budget_;
  std::vector<ParameterState> states_;
  // Per parameter, for StepSlice: where the next slice of a step begun
  // slice by slice starts (0: none is under way), and whether that step
  // made the parameter's buffers.
  struct SliceProgress {
    int64_t next = 0;
    bool fresh = false;
  };
  std::vector<SliceProgress> slices_;
  Reservation state_reservation_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_FUNCTIONAL_OPTIMIZER_H_
