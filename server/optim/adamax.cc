// Adamax, as torch.optim.Adamax (the infinity-norm variant of Adam).
#include <cmath>

#include "server/optim/builtin_kinds.h"

namespace distopt {
namespace {

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
    for (const char* name : {"lr", "eps", "weight_decay"}) {
      absl::Status status = RequireAtLeast(h, name, 0.0);
      if (!status.ok()) return status;
    }
    const auto [beta1, beta2] = h.pair("betas");
    absl::Status status = RequireInRange("betas[0]", beta1, 0.0, 1.0, false);
    if (status.ok()) {
      status = RequireInRange("betas[1]", beta2, 0.0, 1.0, false);
    }
    return status;
  }

  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters&) const override {
    return {{"exp_avg", 0.0}, {"exp_inf", 0.0}};
  }

  void Update(const UpdateArgs& a) const override {
    const Hyperparameters& h = *a.hyperparameters;
    const auto [beta1, beta2] = h.pair("betas");
    const double bias_correction =
        1 - std::pow(beta1, static_cast<double>(a.step));
    const float neg_clr = static_cast<float>(-(h.number("lr") / bias_correction));
    const float b1 = static_cast<float>(beta1);
    const float b2 = static_cast<float>(beta2);
    const float one_minus_b1 = static_cast<float>(1 - beta1);
    const float eps = static_cast<float>(h.number("eps"));
    const float weight_decay = static_cast<float>(h.number("weight_decay"));
    const bool maximize = h.flag("maximize");
    float* exp_avg = a.buffers[0];
    float* exp_inf = a.buffers[1];
    for (int64_t i = 0; i < a.count; ++i) {
      float g = maximize ? -a.grad[i] : a.grad[i];
      if (weight_decay != 0) g = g + weight_decay * a.param[i];
      exp_avg[i] = exp_avg[i] * b1 + one_minus_b1 * g;
      exp_inf[i] = std::fmax(exp_inf[i] * b2, std::fabs(g) + eps);
      a.param[i] = a.param[i] + neg_clr * exp_avg[i] / exp_inf[i];
    }
  }
};

}  // namespace

std::unique_ptr<OptimizerKind> MakeAdamax() {
  return std::make_unique<Adamax>();
}

}  // namespace distopt
