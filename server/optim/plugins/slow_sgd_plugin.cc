// A test plugin: plain SGD that sleeps `delay_seconds` before each update,
// so that tests can hold a step in flight (client deadlines, shutdown while
// stepping) without relying on the timing of real work. When the daemon's
// environment names a file in DISTOPT_SLOW_SGD_MARKER, an update creates it
// before sleeping: a test can wait for the step to be under way.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>

#include "server/optim/plugin_api.h"

namespace {

class SlowSgd : public distopt::OptimizerKind {
 public:
  const std::vector<distopt::HyperparameterSpec>& hyperparameters()
      const override {
    static const auto* specs = new std::vector<distopt::HyperparameterSpec>{
        {"lr", 1e-3, "learning rate"},
        {"delay_seconds", 0.0, "sleep before each parameter's update"},
    };
    return *specs;
  }

  absl::Status Validate(const distopt::Hyperparameters& h) const override {
    return distopt::RequireNonNegative(h, {"lr", "delay_seconds"});
  }

  std::vector<distopt::StateBufferSpec> StateBuffers(
      const distopt::Hyperparameters&) const override {
    return {};
  }

  void Update(const distopt::UpdateArgs& a) const override {
    const distopt::Hyperparameters& h = *a.hyperparameters;
    if (const char* marker = std::getenv("DISTOPT_SLOW_SGD_MARKER")) {
      std::ofstream(marker) << "stepping\n";
    }
    std::this_thread::sleep_for(
        std::chrono::duration<double>(h.number("delay_seconds")));
    const float lr = static_cast<float>(h.number("lr"));
    for (int64_t i = 0; i < a.count; ++i) a.param[i] -= lr * a.grad[i];
  }
};

}  // namespace

extern "C" void DistoptRegisterOptimizerKinds(
    distopt::OptimizerKindSink* sink) {
  sink->Add("slow_sgd", std::make_unique<SlowSgd>());
}
