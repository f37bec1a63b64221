// Adagrad, as torch.optim.Adagrad (lr_decay, initial_accumulator_value,
// weight decay, maximize).
#include <cmath>

#include "server/optim/builtin_kinds.h"

namespace distopt {
namespace {

class Adagrad : public OptimizerKind {
 public:
  const std::vector<HyperparameterSpec>& hyperparameters() const override {
    static const auto* specs = new std::vector<HyperparameterSpec>{
        {"lr", 1e-2, "learning rate"},
        {"lr_decay", 0.0, "learning rate decay"},
        {"weight_decay", 0.0, "L2 penalty"},
        {"initial_accumulator_value", 0.0, "starting value of the sums"},
        {"eps", 1e-10, "added to the denominator for stability"},
        {"maximize", false, "maximize the objective"},
    };
    return *specs;
  }

  absl::Status Validate(const Hyperparameters& h) const override {
    for (const char* name : {"lr", "lr_decay", "weight_decay",
                             "initial_accumulator_value", "eps"}) {
      absl::Status status = RequireAtLeast(h, name, 0.0);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }

  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters& h) const override {
    return {{"sum", h.number("initial_accumulator_value")}};
  }

  void Update(const UpdateArgs& a) const override {
    const Hyperparameters& h = *a.hyperparameters;
    const double clr =
        h.number("lr") /
        (1 + (static_cast<double>(a.step) - 1) * h.number("lr_decay"));
    const float neg_clr = static_cast<float>(-clr);
    const float weight_decay = static_cast<float>(h.number("weight_decay"));
    const float eps = static_cast<float>(h.number("eps"));
    const bool maximize = h.flag("maximize");
    float* sum = a.buffers[0];
    for (int64_t i = 0; i < a.count; ++i) {
      float g = maximize ? -a.grad[i] : a.grad[i];
      if (weight_decay != 0) g = g + weight_decay * a.param[i];
      sum[i] = sum[i] + 1.0f * g * g;
      const float std_dev = std::sqrt(sum[i]) + eps;
      a.param[i] = a.param[i] + neg_clr * g / std_dev;
    }
  }
};

}  // namespace

std::unique_ptr<OptimizerKind> MakeAdagrad() {
  return std::make_unique<Adagrad>();
}

}  // namespace distopt
