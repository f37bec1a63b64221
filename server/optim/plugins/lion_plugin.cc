// An example optimizer plugin: Lion (Chen et al., "Symbolic Discovery of
// Optimization Algorithms", 2023), loaded by the daemon with
// --optimizer_plugin=.../liblion_plugin.so. Build it with
// `bazel build //server/optim/plugins:liblion_plugin.so`.
//
// Per element, with c the interpolation of momentum and gradient:
//   c = beta1 * m + (1 - beta1) * g
//   p = p * (1 - lr * weight_decay) - lr * sign(c)
//   m = beta2 * m + (1 - beta2) * g
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "server/optim/plugin_api.h"

namespace {

using distopt::Hyperparameters;
using distopt::HyperparameterSpec;
using distopt::StateBufferSpec;
using distopt::UpdateArgs;

class Lion : public distopt::OptimizerKind {
 public:
  const std::vector<HyperparameterSpec>& hyperparameters() const override {
    static const auto* specs = new std::vector<HyperparameterSpec>{
        {"lr", 1e-4, "learning rate"},
        {"betas", std::make_pair(0.9, 0.99),
         "interpolation and momentum decay rates"},
        {"weight_decay", 0.0, "decoupled weight decay"},
        {"maximize", false, "maximize the objective"},
    };
    return *specs;
  }

  absl::Status Validate(const Hyperparameters& h) const override {
    absl::Status status =
        distopt::RequireNonNegative(h, {"lr", "weight_decay"});
    if (!status.ok()) return status;
    const auto [beta1, beta2] = h.pair("betas");
    status = distopt::RequireInRange("betas[0]", beta1, 0.0, 1.0, true);
    if (status.ok()) {
      status = distopt::RequireInRange("betas[1]", beta2, 0.0, 1.0, true);
    }
    return status;
  }

  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters&) const override {
    return {{"exp_avg", 0.0}};
  }

  void Update(const UpdateArgs& a) const override {
    const Hyperparameters& h = *a.hyperparameters;
    const auto [beta1, beta2] = h.pair("betas");
    const float lr = static_cast<float>(h.number("lr"));
    const float decay =
        static_cast<float>(1 - h.number("lr") * h.number("weight_decay"));
    const float b1 = static_cast<float>(beta1);
    const float b2 = static_cast<float>(beta2);
    const bool maximize = h.flag("maximize");
    float* m = a.buffers[0];
    for (int64_t i = 0; i < a.count; ++i) {
      const float g = maximize ? -a.grad[i] : a.grad[i];
      const float c = b1 * m[i] + (1 - b1) * g;
      const float sign = c > 0 ? 1.0f : (c < 0 ? -1.0f : 0.0f);
      a.param[i] = a.param[i] * decay - lr * sign;
      m[i] = b2 * m[i] + (1 - b2) * g;
    }
  }
};

}  // namespace

extern "C" void DistoptRegisterOptimizerKinds(
    distopt::OptimizerKindSink* sink) {
  sink->Add("lion", std::make_unique<Lion>());
}
