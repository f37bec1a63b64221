// Adamax, as torch.optim.Adamax (the infinity-norm variant of Adam).
#include <cmath>
#include <utility>

#include "server/optim/builtin_kinds.h"
#include "server/optim/cpu_kernel.h"

namespace distopt {
namespace {

template <bool kMaximize, bool kWeightDecay>
DISTOPT_CPU_KERNEL void AdamaxLoop(int64_t n, float* param, const float* grad,
                                   float* exp_avg, float* exp_inf, float b1,
                                   float b2, float one_minus_b1, float neg_clr,
                                   float eps, float weight_decay) {
  for (int64_t i = 0; i < n; ++i) {
    float g = kMaximize ? -grad[i] : grad[i];
    if (kWeightDecay) g = AddScaled(g, weight_decay, param[i]);
    exp_avg[i] = AddScaled(exp_avg[i] * b1, one_minus_b1, g);
    exp_inf[i] = std::fmax(exp_inf[i] * b2, std::fabs(g) + eps);
    param[i] = AddQuotient(param[i], neg_clr, exp_avg[i], exp_inf[i]);
  }
}

class Adamax : public OptimizerKind {
 public:
  const std::vector<HyperparameterSpec>& hyperparameters() const override {
    static const auto* specs = new std::vector<HyperparameterSpec>{
        {"lr", 2e-3, "learning rate"},
        {"betas", std::make_pair(0.9, 0.999),
         "decay rates of the first moment and of the infinity norm"},
        {"eps", 1e-8, "added to the denominator for stability"},
        {"weight_decay", 0.0, "L2 penalty"},
        {"maximize", false, "maximize the objective"},
    };
    return *specs;
  }

  absl::Status Validate(const Hyperparameters& h) const override {
    absl::Status status = RequireNonNegative(h, {"lr", "eps", "weight_decay"});
    if (!status.ok()) return status;
    return RequireBetas(h, "betas");
  }

  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters&) const override {
    return {{"exp_avg", 0.0}, {"exp_inf", 0.0}};
  }

  void Update(const UpdateArgs& a) const override {
    const Hyperparameters& h = *a.hyperparameters;
    // Named copies, not structured bindings: the lambda below captures
    // them, which C++17 does not allow for bindings (clang refuses).
    const std::pair<double, double> betas = h.pair("betas");
    const double beta1 = betas.first;
    const double beta2 = betas.second;
    const double bias_correction =
        1 - std::pow(beta1, static_cast<double>(a.step));
    const float weight_decay = static_cast<float>(h.number("weight_decay"));
    WithFlags(
        [&](auto maximize, auto decay) {
          AdamaxLoop<decltype(maximize)::value, decltype(decay)::value>(
              a.count, a.param, a.grad, a.buffers[0], a.buffers[1],
              static_cast<float>(beta1), static_cast<float>(beta2),
              static_cast<float>(1 - beta1),
              static_cast<float>(-(h.number("lr") / bias_correction)),
              static_cast<float>(h.number("eps")), weight_decay);
        },
        h.flag("maximize"), weight_decay != 0);
  }

  absl::Status PrepareCudaLaunch(const Hyperparameters& h,
                                 const std::vector<int64_t>& steps,
                                 const std::vector<bool>&,
                                 multi_tensor::Launch& launch) const override {
    using namespace multi_tensor;  // NOLINT: Op and Flag names.
    const auto [beta1, beta2] = h.pair("betas");
    launch.op = Op::kAdamax;
    launch.flags = (h.flag("maximize") ? kMaximize : 0) |
                   (h.number("weight_decay") != 0 ? kWeightDecay : 0);
    launch.scalars[0] = static_cast<float>(beta1);
    launch.scalars[1] = static_cast<float>(beta2);
    launch.scalars[2] = static_cast<float>(1 - beta1);
    launch.scalars[3] = static_cast<float>(h.number("eps"));
    launch.scalars[4] = static_cast<float>(h.number("weight_decay"));
    for (size_t t = 0; t < launch.tensors.size(); ++t) {
      launch.tensors[t].scalars[0] = static_cast<float>(
          -(h.number("lr") /
            (1 - std::pow(beta1, static_cast<double>(steps[t])))));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<OptimizerKind> MakeAdamax() {
  return std::make_unique<Adamax>();
}

}  // namespace distopt
