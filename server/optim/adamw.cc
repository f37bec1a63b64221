// AdamW, as torch.optim.AdamW: Adam with decoupled weight decay (default
// 1e-2) applied to the parameter before the moment updates.
#include "server/optim/adam.h"
#include "server/optim/builtin_kinds.h"

namespace distopt {
namespace {

class AdamW : public OptimizerKind {
 public:
  const std::vector<HyperparameterSpec>& hyperparameters() const override {
    static const auto* specs =
        new std::vector<HyperparameterSpec>(AdamHyperparameters(1e-2));
    return *specs;
  }
  absl::Status Validate(const Hyperparameters& h) const override {
    return ValidateAdam(h);
  }
  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters& h) const override {
    return AdamStateBuffers(h);
  }
  void Update(const UpdateArgs& args) const override {
    AdamUpdate(args, /*decoupled_weight_decay=*/true);
  }

  absl::Status PrepareCudaLaunch(const Hyperparameters& h,
                                 const std::vector<int64_t>& steps,
                                 const std::vector<bool>&,
                                 multi_tensor::Launch& launch) const override {
    return PrepareAdamCudaLaunch(h, steps, /*decoupled_weight_decay=*/true,
                                 launch);
  }
};

}  // namespace

std::unique_ptr<OptimizerKind> MakeAdamW() { return std::make_unique<AdamW>(); }

}  // namespace distopt
