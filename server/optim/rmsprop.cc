// RMSprop, as torch.optim.RMSprop (alpha, centered, momentum, weight decay,
// maximize).
#include <cmath>

#include "server/optim/builtin_kinds.h"
#include "server/optim/cpu_kernel.h"

namespace distopt {
namespace {

template <bool kMaximize, bool kWeightDecay, bool kCentered, bool kMomentum>
DISTOPT_CPU_KERNEL void RmspropLoop(int64_t n, float* param, const float* grad,
                                    float* square_avg, float* buf,
                                    float* grad_avg, float neg_lr, float alpha,
                                    float one_minus_alpha, float eps,
                                    float weight_decay, float momentum) {
  for (int64_t i = 0; i < n; ++i) {
    float g = kMaximize ? -grad[i] : grad[i];
    if (kWeightDecay) g = AddScaled(g, weight_decay, param[i]);
    square_avg[i] = AddProduct(square_avg[i] * alpha, one_minus_alpha, g, g);
    float avg;
    if (kCentered) {
      grad_avg[i] = AddScaled(grad_avg[i] * alpha, one_minus_alpha, g);
      avg =
          std::sqrt(AddProduct(square_avg[i], -1.0f, grad_avg[i], grad_avg[i]));
    } else {
      avg = std::sqrt(square_avg[i]);
    }
    avg = avg + eps;
    if (kMomentum) {
      buf[i] = AddQuotient(buf[i] * momentum, 1.0f, g, avg);
      param[i] = AddScaled(param[i], neg_lr, buf[i]);
    } else {
      param[i] = AddQuotient(param[i], neg_lr, g, avg);
    }
  }
}

class Rmsprop : public OptimizerKind {
 public:
  const std::vector<HyperparameterSpec>& hyperparameters() const override {
    static const auto* specs = new std::vector<HyperparameterSpec>{
        {"lr", 1e-2, "learning rate"},
        {"alpha", 0.99, "smoothing constant"},
        {"eps", 1e-8, "added to the denominator for stability"},
        {"weight_decay", 0.0, "L2 penalty"},
        {"momentum", 0.0, "momentum factor"},
        {"centered", false, "normalise by the estimated variance"},
        {"maximize", false, "maximize the objective"},
    };
    return *specs;
  }

  absl::Status Validate(const Hyperparameters& h) const override {
    return RequireNonNegative(
        h, {"lr", "eps", "momentum", "weight_decay", "alpha"});
  }

  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters& h) const override {
    std::vector<StateBufferSpec> buffers = {{"square_avg", 0.0}};
    if (h.number("momentum") > 0) buffers.push_back({"momentum_buffer", 0.0});
    if (h.flag("centered")) buffers.push_back({"grad_avg", 0.0});
    return buffers;
  }

  void Update(const UpdateArgs& a) const override {
    const Hyperparameters& h = *a.hyperparameters;
    const bool has_momentum = h.number("momentum") > 0;
    const bool centered = h.flag("centered");
    const float weight_decay = static_cast<float>(h.number("weight_decay"));
    WithFlags(
        [&](auto maximize, auto decay, auto center, auto with_momentum) {
          RmspropLoop<decltype(maximize)::value, decltype(decay)::value,
                      decltype(center)::value, decltype(with_momentum)::value>(
              a.count, a.param, a.grad, a.buffers[0],
              has_momentum ? a.buffers[1] : nullptr,
              centered ? a.buffers[has_momentum ? 2 : 1] : nullptr,
              static_cast<float>(-h.number("lr")),
              static_cast<float>(h.number("alpha")),
              static_cast<float>(1 - h.number("alpha")),
              static_cast<float>(h.number("eps")), weight_decay,
              static_cast<float>(h.number("momentum")));
        },
        h.flag("maximize"), weight_decay != 0, centered, has_momentum);
  }

  absl::Status PrepareCudaLaunch(const Hyperparameters& h,
                                 const std::vector<int64_t>&,
                                 const std::vector<bool>&,
                                 multi_tensor::Launch& launch) const override {
    using namespace multi_tensor;  // NOLINT: Op and Flag names.
    launch.op = Op::kRmsprop;
    launch.flags = (h.flag("maximize") ? kMaximize : 0) |
                   (h.number("weight_decay") != 0 ? kWeightDecay : 0) |
                   (h.flag("centered") ? kCentered : 0) |
                   (h.number("momentum") > 0 ? kMomentum : 0);
    launch.scalars[0] = static_cast<float>(-h.number("lr"));
    launch.scalars[1] = static_cast<float>(h.number("alpha"));
    launch.scalars[2] = static_cast<float>(1 - h.number("alpha"));
    launch.scalars[3] = static_cast<float>(h.number("eps"));
    launch.scalars[4] = static_cast<float>(h.number("weight_decay"));
    launch.scalars[5] = static_cast<float>(h.number("momentum"));
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<OptimizerKind> MakeRmsprop() {
  return std::make_unique<Rmsprop>();
}

}  // namespace distopt
