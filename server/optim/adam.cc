// Adam and AdamW, as torch.optim.Adam and torch.optim.AdamW: amsgrad,
// maximize, and weight decay either added to the gradient (Adam, L2) or
// applied to the parameter before the moment updates (AdamW, decoupled).
#include "server/optim/adam.h"

#include <cmath>

#include "server/optim/cpu_kernel.h"

namespace distopt {
namespace {

template <bool kMaximize, bool kL2, bool kDecoupled, bool kAmsgrad>
DISTOPT_CPU_KERNEL void AdamLoop(int64_t n, float* param, const float* grad,
                                 float* exp_avg, float* exp_avg_sq,
                                 float* max_exp_avg_sq, float b1, float b2,
                                 float one_minus_b1, float one_minus_b2,
                                 float neg_step_size,
                                 float bias_correction2_sqrt, float eps,
                                 float l2, float decay) {
  for (int64_t i = 0; i < n; ++i) {
    float g = kMaximize ? -grad[i] : grad[i];
    float p = param[i];
    if (kDecoupled) {
      p = p * decay;
    } else if (kL2) {
      g = AddScaled(g, l2, p);
    }
    exp_avg[i] = AddScaled(exp_avg[i] * b1, one_minus_b1, g);
    exp_avg_sq[i] = AddProduct(exp_avg_sq[i] * b2, one_minus_b2, g, g);
    float second = exp_avg_sq[i];
    if (kAmsgrad) {
      max_exp_avg_sq[i] = std::fmax(max_exp_avg_sq[i], exp_avg_sq[i]);
      second = max_exp_avg_sq[i];
    }
    const float denom = std::sqrt(second) / bias_correction2_sqrt + eps;
    param[i] = AddQuotient(p, neg_step_size, exp_avg[i], denom);
  }
}

class AdamFamily : public OptimizerKind {
 public:
  explicit AdamFamily(bool decoupled)
      : decoupled_(decoupled),
        hyperparameters_({
            {"lr", 1e-3, "learning rate"},
            {"betas", std::make_pair(0.9, 0.999),
             "decay rates of the first and second moment averages"},
            {"eps", 1e-8, "added to the denominator for stability"},
            {"weight_decay", decoupled ? 1e-2 : 0.0,
             decoupled ? "decoupled weight decay" : "L2 penalty"},
            {"amsgrad", false, "use the maximum of past second moments"},
            {"maximize", false, "maximize the objective"},
        }) {}

  const std::vector<HyperparameterSpec>& hyperparameters() const override {
    return hyperparameters_;
  }

  absl::Status Validate(const Hyperparameters& h) const override {
    absl::Status status = RequireNonNegative(h, {"lr", "eps", "weight_decay"});
    if (status.ok()) status = RequireBetas(h, "betas");
    return status;
  }

  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters& h) const override {
    std::vector<StateBufferSpec> buffers = {{"exp_avg", 0.0},
                                            {"exp_avg_sq", 0.0}};
    if (h.flag("amsgrad")) buffers.push_back({"max_exp_avg_sq", 0.0});
    return buffers;
  }

  void Update(const UpdateArgs& a) const override {
    const Hyperparameters& h = *a.hyperparameters;
    const double lr = h.number("lr");
    const auto [beta1, beta2] = h.pair("betas");
    const double weight_decay = h.number("weight_decay");
    const bool maximize = h.flag("maximize");
    const bool amsgrad = h.flag("amsgrad");
    // Scalars are computed in double and used in fp32, as torch.optim does.
    const double step = static_cast<double>(a.step);
    const double bias_correction1 = 1 - std::pow(beta1, step);
    const double bias_correction2 = 1 - std::pow(beta2, step);
    const float neg_step_size = static_cast<float>(-(lr / bias_correction1));
    const float bias_correction2_sqrt =
        static_cast<float>(std::sqrt(bias_correction2));
    const float b1 = static_cast<float>(beta1);
    const float b2 = static_cast<float>(beta2);
    const float one_minus_b1 = static_cast<float>(1 - beta1);
    const float one_minus_b2 = static_cast<float>(1 - beta2);
    const float eps = static_cast<float>(h.number("eps"));
    const float l2 = decoupled_ ? 0.0f : static_cast<float>(weight_decay);
    const float decay = static_cast<float>(1 - lr * weight_decay);
    WithFlags(
        [&](auto maximize_flag, auto l2_flag, auto decoupled, auto ams) {
          AdamLoop<decltype(maximize_flag)::value, decltype(l2_flag)::value,
                   decltype(decoupled)::value, decltype(ams)::value>(
              a.count, a.param, a.grad, a.buffers[0], a.buffers[1],
              amsgrad ? a.buffers[2] : nullptr, b1, b2, one_minus_b1,
              one_minus_b2, neg_step_size, bias_correction2_sqrt, eps, l2,
              decay);
        },
        maximize, l2 != 0, decoupled_, amsgrad);
  }

  absl::Status PrepareCudaLaunch(const Hyperparameters& h,
                                 const std::vector<int64_t>& steps,
                                 const std::vector<bool>&,
                                 multi_tensor::Launch& launch) const override {
    using namespace multi_tensor;  // NOLINT: Op and Flag names.
    const double lr = h.number("lr");
    const auto [beta1, beta2] = h.pair("betas");
    const double weight_decay = h.number("weight_decay");
    launch.op = Op::kAdam;
    launch.flags = (h.flag("maximize") ? kMaximize : 0) |
                   (h.flag("amsgrad") ? kAmsgrad : 0) |
                   (decoupled_ ? kDecoupled : 0) |
                   (!decoupled_ && weight_decay != 0 ? kWeightDecay : 0);
    launch.scalars[0] = static_cast<float>(beta1);
    launch.scalars[1] = static_cast<float>(beta2);
    launch.scalars[2] = static_cast<float>(1 - beta1);
    launch.scalars[3] = static_cast<float>(1 - beta2);
    launch.scalars[4] = static_cast<float>(h.number("eps"));
    launch.scalars[5] = static_cast<float>(weight_decay);
    launch.scalars[6] = static_cast<float>(1 - lr * weight_decay);
    for (size_t t = 0; t < launch.tensors.size(); ++t) {
      const double step = static_cast<double>(steps[t]);
      launch.tensors[t].scalars[0] =
          static_cast<float>(-(lr / (1 - std::pow(beta1, step))));
      launch.tensors[t].scalars[1] =
          static_cast<float>(std::sqrt(1 - std::pow(beta2, step)));
    }
    return absl::OkStatus();
  }

 private:
  const bool decoupled_;
  const std::vector<HyperparameterSpec> hyperparameters_;
};

}  // namespace

std::unique_ptr<OptimizerKind> MakeAdamFamily(bool decoupled_weight_decay) {
  return std::make_unique<AdamFamily>(decoupled_weight_decay);
}

std::unique_ptr<OptimizerKind> MakeAdam() {
  return MakeAdamFamily(/*decoupled_weight_decay=*/false);
}

}  // namespace distopt
