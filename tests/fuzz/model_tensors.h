// Tensors of a target's own in the layout of the model of fuzz_support.h,
// for an optimizer made outside the daemon: one that is given a state dict
// or hyperparameters the daemon accepted and then steps, to show that what
// was accepted is safe to step with.
#ifndef DISTOPT_TESTS_FUZZ_MODEL_TENSORS_H_
#define DISTOPT_TESTS_FUZZ_MODEL_TENSORS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/tensor.h"
#include "server/data_parallel/named_groups.h"
#include "server/data_parallel/param_groups.h"
#include "server/optim/functional_optimizer.h"

namespace distopt {
namespace fuzz {

// Every byte of a parameter is 0x3c (a small finite value in each of the
// model's dtypes) and every byte of a gradient is the `gradient_byte` given.
class ModelTensors {
 public:
  // The whole model, in order (ids 1 to kModelParameters).
  explicit ModelTensors(uint8_t gradient_byte);
  // The model's parameters `ids` (each 1 to kModelParameters), in that
  // order.
  ModelTensors(absl::Span<const uint64_t> ids, uint8_t gradient_byte);
  // Not copyable: optimizers hold pointers to the tensors.
  ModelTensors(const ModelTensors&) = delete;
  ModelTensors& operator=(const ModelTensors&) = delete;

  size_t size() const { return params_.size(); }
  // For FunctionalOptimizer::Create and Step, in the order of the ids.
  const std::vector<ParameterLayout>& layouts() const { return layouts_; }
  std::vector<Tensor*> Params();
  std::vector<const Tensor*> Grads();

  // For a data-parallel optimizer: the tensors in the parameter groups
  // `groups` (by parameter name, as ModelZeroSpec and ModelLocalSgdSpec
  // give them), with the groups' hyperparameters. Aborts on a name that is
  // not among the ids.
  std::vector<ParamGroup> Groups(const std::vector<NamedGroupSpec>& groups);
  // The gradients for Groups(groups), but none for fc.bias: a step must
  // also take a parameter that has no gradient.
  GroupGradientPointers GroupGrads(const std::vector<NamedGroupSpec>& groups);

 private:
  // Where the parameter named `name` is among the ids.
  size_t Position(const std::string& name) const;

  std::vector<uint64_t> ids_;
  std::vector<ParameterLayout> layouts_;
  std::vector<Tensor> params_;
  std::vector<Tensor> grads_;
};

}  // namespace fuzz
}  // namespace distopt

#endif  // DISTOPT_TESTS_FUZZ_MODEL_TENSORS_H_
