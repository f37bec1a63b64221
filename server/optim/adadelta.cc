// Adadelta, as torch.optim.Adadelta (rho, eps, weight decay, maximize).
#include <cmath>

#include "server/optim/builtin_kinds.h"
#include "server/optim/cpu_kernel.h"

namespace distopt {
namespace {

template <bool kMaximize, bool kWeightDecay>
DISTOPT_CPU_KERNEL void AdadeltaLoop(int64_t n, float* param, const float* grad,
                                     float* square_avg, float* acc_delta,
                                     float neg_lr, float rho,
                                     float one_minus_rho, float eps,
                                     float weight_decay) {
  for (int64_t i = 0; i < n; ++i) {
    float g = kMaximize ? -grad[i] : grad[i];
    if (kWeightDecay) g = AddScaled(g, weight_decay, param[i]);
    square_avg[i] = AddProduct(square_avg[i] * rho, one_minus_rho, g, g);
    const float std_dev = std::sqrt(square_avg[i] + eps);
    const float delta = std::sqrt(acc_delta[i] + eps) / std_dev * g;
    acc_delta[i] = AddProduct(acc_delta[i] * rho, one_minus_rho, delta, delta);
    param[i] = AddScaled(param[i], neg_lr, delta);
  }
}

class Adadelta : public OptimizerKind {
 public:
  const std::vector<HyperparameterSpec>& hyperparameters() const override {
    static const auto* specs = new std::vector<HyperparameterSpec>{
        {"lr", 1.0, "coefficient that scales delta"},
        {"rho", 0.9, "decay rate of the running averages"},
        {"eps", 1e-6, "added to the denominator for stability"},
        {"weight_decay", 0.0, "L2 penalty"},
        {"maximize", false, "maximize the objective"},
    };
    return *specs;
  }

  absl::Status Validate(const Hyperparameters& h) const override {
    absl::Status status = RequireNonNegative(h, {"lr", "eps", "weight_decay"});
    if (!status.ok()) return status;
    return RequireInRange("rho", h.number("rho"), 0.0, 1.0, true);
  }

  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters&) const override {
    return {{"square_avg", 0.0}, {"acc_delta", 0.0}};
  }

  void Update(const UpdateArgs& a) const override {
    const Hyperparameters& h = *a.hyperparameters;
    const float weight_decay = static_cast<float>(h.number("weight_decay"));
    WithFlags(
        [&](auto maximize, auto decay) {
          AdadeltaLoop<decltype(maximize)::value, decltype(decay)::value>(
              a.count, a.param, a.grad, a.buffers[0], a.buffers[1],
              static_cast<float>(-h.number("lr")),
              static_cast<float>(h.number("rho")),
              static_cast<float>(1 - h.number("rho")),
              static_cast<float>(h.number("eps")), weight_decay);
        },
        h.flag("maximize"), weight_decay != 0);
  }

  absl::Status PrepareCudaLaunch(const Hyperparameters& h,
                                 const std::vector<int64_t>&,
                                 const std::vector<bool>&,
                                 multi_tensor::Launch& launch) const override {
    using namespace multi_tensor;  // NOLINT: Op and Flag names.
    launch.op = Op::kAdadelta;
    launch.flags = (h.flag("maximize") ? kMaximize : 0) |
                   (h.number("weight_decay") != 0 ? kWeightDecay : 0);
    launch.scalars[0] = static_cast<float>(-h.number("lr"));
    launch.scalars[1] = static_cast<float>(h.number("rho"));
    launch.scalars[2] = static_cast<float>(1 - h.number("rho"));
    launch.scalars[3] = static_cast<float>(h.number("eps"));
    launch.scalars[4] = static_cast<float>(h.number("weight_decay"));
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<OptimizerKind> MakeAdadelta() {
  return std::make_unique<Adadelta>();
}

}  // namespace distopt
