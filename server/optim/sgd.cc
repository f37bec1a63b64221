// SGD with momentum, dampening, Nesterov, weight decay and maximize, as
// torch.optim.SGD (lr defaults to 1e-3, as in PyTorch 2.x).
#include "absl/strings/str_cat.h"
#include "server/optim/builtin_kinds.h"
#include "server/optim/cpu_kernel.h"

namespace distopt {
namespace {

template <bool kMaximize, bool kWeightDecay, bool kMomentum, bool kNesterov,
          bool kFirst>
DISTOPT_CPU_KERNEL void SgdLoop(int64_t n, float* param, const float* grad,
                                float* buf, float lr, float momentum,
                                float one_minus_dampening, float weight_decay) {
  for (int64_t i = 0; i < n; ++i) {
    float d = kMaximize ? -grad[i] : grad[i];
    if (kWeightDecay) d = AddScaled(d, weight_decay, param[i]);
    if (kMomentum) {
      buf[i] =
          kFirst ? d : AddScaled(buf[i] * momentum, one_minus_dampening, d);
      d = kNesterov ? AddScaled(d, momentum, buf[i]) : buf[i];
    }
    param[i] = AddScaled(param[i], -lr, d);
  }
}

class Sgd : public OptimizerKind {
 public:
  const std::vector<HyperparameterSpec>& hyperparameters() const override {
    static const auto* specs = new std::vector<HyperparameterSpec>{
        {"lr", 1e-3, "learning rate"},
        {"momentum", 0.0, "momentum factor"},
        {"dampening", 0.0, "dampening for momentum"},
        {"weight_decay", 0.0, "L2 penalty"},
        {"nesterov", false, "Nesterov momentum"},
        {"maximize", false, "maximize the objective"},
    };
    return *specs;
  }

  absl::Status Validate(const Hyperparameters& h) const override {
    absl::Status status =
        RequireNonNegative(h, {"lr", "momentum", "weight_decay"});
    if (!status.ok()) return status;
    if (h.flag("nesterov") &&
        (h.number("momentum") <= 0 || h.number("dampening") != 0)) {
      return absl::InvalidArgumentError(
          "hyperparameters.nesterov: Nesterov momentum requires a momentum "
          "and zero dampening; expected momentum > 0 and dampening = 0");
    }
    return absl::OkStatus();
  }

  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters& h) const override {
    if (h.number("momentum") == 0) return {};
    return {{"momentum_buffer", 0.0}};
  }

  bool has_step_state() const override { return false; }

  void Update(const UpdateArgs& a) const override {
    const Hyperparameters& h = *a.hyperparameters;
    const float lr = static_cast<float>(h.number("lr"));
    const float momentum = static_cast<float>(h.number("momentum"));
    const float one_minus_dampening =
        static_cast<float>(1.0 - h.number("dampening"));
    const float weight_decay = static_cast<float>(h.number("weight_decay"));
    const bool nesterov = h.flag("nesterov");
    const bool maximize = h.flag("maximize");
    const bool has_momentum = h.number("momentum") != 0;
    // torch.optim creates the buffer on the first step as a copy of the
    // gradient, without dampening.
    WithFlags(
        [&](auto max, auto decay, auto with_momentum, auto nest, auto first) {
          SgdLoop<decltype(max)::value, decltype(decay)::value,
                  decltype(with_momentum)::value, decltype(nest)::value,
                  decltype(first)::value>(
              a.count, a.param, a.grad, has_momentum ? a.buffers[0] : nullptr,
              lr, momentum, one_minus_dampening, weight_decay);
        },
        maximize, weight_decay != 0, has_momentum, nesterov, a.fresh_buffers);
  }

  absl::Status PrepareCudaLaunch(const Hyperparameters& h,
                                 const std::vector<int64_t>&,
                                 const std::vector<bool>& fresh,
                                 multi_tensor::Launch& launch) const override {
    using namespace multi_tensor;  // NOLINT: Op and Flag names.
    launch.op = Op::kSgd;
    launch.flags = (h.flag("maximize") ? kMaximize : 0) |
                   (h.number("weight_decay") != 0 ? kWeightDecay : 0) |
                   (h.number("momentum") != 0 ? kMomentum : 0) |
                   (h.flag("nesterov") ? kNesterov : 0);
    launch.scalars[0] = static_cast<float>(h.number("lr"));
    launch.scalars[1] = static_cast<float>(h.number("momentum"));
    launch.scalars[2] = static_cast<float>(1.0 - h.number("dampening"));
    launch.scalars[3] = static_cast<float>(h.number("weight_decay"));
    for (size_t t = 0; t < launch.tensors.size(); ++t) {
      launch.tensors[t].scalars[0] = fresh[t] ? 1.0f : 0.0f;
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<OptimizerKind> MakeSgd() { return std::make_unique<Sgd>(); }

}  // namespace distopt
