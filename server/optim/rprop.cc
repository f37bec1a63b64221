// Rprop, as torch.optim.Rprop (etas, step_sizes, maximize).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/optim/builtin_kinds.h"
#include "server/optim/cpu_kernel.h"

namespace distopt {
namespace {

template <bool kMaximize>
DISTOPT_CPU_KERNEL void RpropLoop(int64_t n, float* param, const float* grad,
                                  float* prev, float* step_size, float etaminus,
                                  float etaplus, float step_min,
                                  float step_max) {
  for (int64_t i = 0; i < n; ++i) {
    float g = kMaximize ? -grad[i] : grad[i];
    const float product = g * prev[i];
    const float factor =
        product > 0 ? etaplus : (product < 0 ? etaminus : 1.0f);
    step_size[i] =
        std::min(std::max(step_size[i] * factor, step_min), step_max);
    // After a sign change the step is skipped and the gradient forgotten.
    if (product < 0) g = 0;
    const float sign = g > 0 ? 1.0f : (g < 0 ? -1.0f : 0.0f);
    param[i] = AddProduct(param[i], -1.0f, sign, step_size[i]);
    prev[i] = g;
  }
}

class Rprop : public OptimizerKind {
 public:
  const std::vector<HyperparameterSpec>& hyperparameters() const override {
    static const auto* specs = new std::vector<HyperparameterSpec>{
        {"lr", 1e-2, "initial step size"},
        {"etas", std::make_pair(0.5, 1.2),
         "multiplicative decrease and increase factors"},
        {"step_sizes", std::make_pair(1e-6, 50.0),
         "minimal and maximal step sizes"},
        {"maximize", false, "maximize the objective"},
    };
    return *specs;
  }

  absl::Status Validate(const Hyperparameters& h) const override {
    absl::Status status = RequireAtLeast(h, "lr", 0.0);
    if (!status.ok()) return status;
    const auto [etaminus, etaplus] = h.pair("etas");
    if (!(0.0 < etaminus && etaminus < 1.0 && 1.0 < etaplus)) {
      return absl::InvalidArgumentError(
          absl::StrCat("hyperparameters.etas: invalid value (", etaminus, ", ",
                       etaplus, "); expected 0 < etas[0] < 1 < etas[1]"));
    }
    const auto [step_min, step_max] = h.pair("step_sizes");
    if (!(0.0 <= step_min && step_min <= step_max)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hyperparameters.step_sizes: invalid value (", step_min, ", ",
          step_max, "); expected 0 <= step_sizes[0] <= step_sizes[1]"));
    }
    return absl::OkStatus();
  }

  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters& h) const override {
    return {{"prev", 0.0}, {"step_size", h.number("lr")}};
  }

  void Update(const UpdateArgs& a) const override {
    const Hyperparameters& h = *a.hyperparameters;
    // Named copies, not structured bindings: C++17 lambdas cannot capture
    // those (clang refuses).
    const auto etas = h.pair("etas");
    const auto step_sizes = h.pair("step_sizes");
    const float etaminus = static_cast<float>(etas.first);
    const float etaplus = static_cast<float>(etas.second);
    const float step_min = static_cast<float>(step_sizes.first);
    const float step_max = static_cast<float>(step_sizes.second);
    WithFlags(
        [&](auto maximize) {
          RpropLoop<decltype(maximize)::value>(
              a.count, a.param, a.grad, a.buffers[0], a.buffers[1], etaminus,
              etaplus, step_min, step_max);
        },
        h.flag("maximize"));
  }

  absl::Status PrepareCudaLaunch(const Hyperparameters& h,
                                 const std::vector<int64_t>&,
                                 const std::vector<bool>&,
                                 multi_tensor::Launch& launch) const override {
    using namespace multi_tensor;  // NOLINT: Op and Flag names.
    const auto [etaminus, etaplus] = h.pair("etas");
    const auto [step_min, step_max] = h.pair("step_sizes");
    launch.op = Op::kRprop;
    launch.flags = h.flag("maximize") ? kMaximize : 0;
    launch.scalars[0] = static_cast<float>(etaminus);
    launch.scalars[1] = static_cast<float>(etaplus);
    launch.scalars[2] = static_cast<float>(step_min);
    launch.scalars[3] = static_cast<float>(step_max);
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<OptimizerKind> MakeRprop() { return std::make_unique<Rprop>(); }

}  // namespace distopt
