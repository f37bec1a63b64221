// Adadelta, as torch.optim.Adadelta (rho, eps, weight decay, maximize).
#include <cmath>

#include "server/optim/builtin_kinds.h"

namespace distopt {
namespace {

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
    for (const char* name : {"lr", "eps", "weight_decay"}) {
      absl::Status status = RequireAtLeast(h, name, 0.0);
      if (!status.ok()) return status;
    }
    return RequireInRange("rho", h.number("rho"), 0.0, 1.0, true);
  }

  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters&) const override {
    return {{"square_avg", 0.0}, {"acc_delta", 0.0}};
  }

  void Update(const UpdateArgs& a) const override {
    const Hyperparameters& h = *a.hyperparameters;
    const float neg_lr = static_cast<float>(-h.number("lr"));
    const float rho = static_cast<float>(h.number("rho"));
    const float one_minus_rho = static_cast<float>(1 - h.number("rho"));
    const float eps = static_cast<float>(h.number("eps"));
    const float weight_decay = static_cast<float>(h.number("weight_decay"));
    const bool maximize = h.flag("maximize");
    float* square_avg = a.buffers[0];
    float* acc_delta = a.buffers[1];
    for (int64_t i = 0; i < a.count; ++i) {
      float g = maximize ? -a.grad[i] : a.grad[i];
      if (weight_decay != 0) g = g + weight_decay * a.param[i];
      square_avg[i] = square_avg[i] * rho + one_minus_rho * g * g;
      const float std_dev = std::sqrt(square_avg[i] + eps);
      const float delta = std::sqrt(acc_delta[i] + eps) / std_dev * g;
      acc_delta[i] = acc_delta[i] * rho + one_minus_rho * delta * delta;
      a.param[i] = a.param[i] + neg_lr * delta;
    }
  }
};

}  // namespace

std::unique_ptr<OptimizerKind> MakeAdadelta() {
  return std::make_unique<Adadelta>();
}

}  // namespace distopt
