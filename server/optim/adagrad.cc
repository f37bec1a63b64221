// Adagrad, as torch.optim.Adagrad (lr_decay, initial_accumulator_value,
// weight decay, maximize).
#include <cmath>

#include "server/optim/builtin_kinds.h"
#include "server/optim/cpu_kernel.h"

namespace distopt {
namespace {

template <bool kMaximize, bool kWeightDecay>
DISTOPT_CPU_KERNEL void AdagradLoop(int64_t n, float* param, const float* grad,
                                    float* sum, float neg_clr,
                                    float weight_decay, float eps) {
  for (int64_t i = 0; i < n; ++i) {
    float g = kMaximize ? -grad[i] : grad[i];
    if (kWeightDecay) g = AddScaled(g, weight_decay, param[i]);
    sum[i] = AddProduct(sum[i], 1.0f, g, g);
    const float std_dev = std::sqrt(sum[i]) + eps;
    param[i] = AddQuotient(param[i], neg_clr, g, std_dev);
  }
}

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
    return RequireNonNegative(h, {"lr", "lr_decay", "weight_decay",
                                  "initial_accumulator_value", "eps"});
  }

  bool creates_state_eagerly() const override { return true; }

  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters& h) const override {
    return {{"sum", h.number("initial_accumulator_value")}};
  }

  void Update(const UpdateArgs& a) const override {
    const Hyperparameters& h = *a.hyperparameters;
    const double clr = h.number("lr") / (1 + (static_cast<double>(a.step) - 1) *
                                                 h.number("lr_decay"));
    const float weight_decay = static_cast<float>(h.number("weight_decay"));
    WithFlags(
        [&](auto maximize, auto decay) {
          AdagradLoop<decltype(maximize)::value, decltype(decay)::value>(
              a.count, a.param, a.grad, a.buffers[0], static_cast<float>(-clr),
              weight_decay, static_cast<float>(h.number("eps")));
        },
        h.flag("maximize"), weight_decay != 0);
  }

  absl::Status PrepareCudaLaunch(const Hyperparameters& h,
                                 const std::vector<int64_t>& steps,
                                 const std::vector<bool>&,
                                 multi_tensor::Launch& launch) const override {
    using namespace multi_tensor;  // NOLINT: Op and Flag names.
    launch.op = Op::kAdagrad;
    launch.flags = (h.flag("maximize") ? kMaximize : 0) |
                   (h.number("weight_decay") != 0 ? kWeightDecay : 0);
    launch.scalars[0] = static_cast<float>(h.number("weight_decay"));
    launch.scalars[1] = static_cast<float>(h.number("eps"));
    for (size_t t = 0; t < launch.tensors.size(); ++t) {
      launch.tensors[t].scalars[0] = static_cast<float>(
          -(h.number("lr") /
            (1 + (static_cast<double>(steps[t]) - 1) * h.number("lr_decay"))));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<OptimizerKind> MakeAdagrad() {
  return std::make_unique<Adagrad>();
}

}  // namespace distopt
