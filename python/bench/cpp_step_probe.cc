// The C++ side of python_step_bench.py: the same calls through the C++
// client against the same workers, timed the same way, so that the Python
// package's overhead is the difference of two figures from one run.
//
//   cpp_step_probe ITERATIONS WORKER...
//
// Prints "step_p50_us X" (DistributedOptimizer.step, SGD, 10 parameters of
// 1K floats spread over the workers, gradients pushed outside the timing)
// and "linear_p50_us Y" (a RemoteLinear(1024, 1024) forward and backward
// of a [256, 1024] batch on the first worker).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/timing.h"
#include "client/client.h"
#include "client/dist_autograd_context.h"
#include "client/distributed_optimizer.h"
#include "client/layers.h"

namespace distopt {
namespace {

double StepP50(Client& client, const std::vector<std::string>& workers,
               int iterations) {
  std::vector<RemoteParameter> parameters;
  for (int i = 0; i < 10; ++i) {
    parameters.push_back(*client.CreateParameter(workers[i % workers.size()],
                                                 absl::StrCat("cpp_probe.p", i),
                                                 DType::kFloat32, {1024}));
  }
  auto optimizer = *DistributedOptimizer::Create(&client, "sgd", parameters,
                                                 {{"lr", hyper::Number(1e-3)}});
  Tensor gradient = *Tensor::AllocateHost(DType::kFloat32, {1024});
  std::fill_n(static_cast<float*>(gradient.data()), 1024, 1.0f);
  std::vector<std::pair<RemoteParameter, Tensor>> pushes;
  for (const RemoteParameter& p : parameters) pushes.emplace_back(p, gradient);
  std::vector<double> micros;
  for (int it = 0; it < iterations; ++it) {
    DistAutogradContext context(&client);
    if (!context.AccumulateGradients(pushes).ok()) std::exit(1);
    bool ok = true;
    micros.push_back(1e6 * bench::SecondsOf([&] {
                       ok = optimizer->Step(context.id()).ok();
                     }));
    if (!ok) std::exit(1);
  }
  optimizer.reset();
  for (const RemoteParameter& p : parameters) {
    client.DeleteParameter(p).IgnoreError();
  }
  return bench::Percentile(micros, 0.5);
}

double LinearP50(Client& client, const std::string& worker, int iterations) {
  RemoteLinear layer =
      *RemoteLinear::Create(&client, worker, "cpp_probe.fc", 1024, 1024, 1);
  Tensor x = *Tensor::AllocateHost(DType::kFloat32, {256, 1024});
  std::fill_n(static_cast<float*>(x.data()), 256 * 1024, 0.5f);
  Tensor ones = *Tensor::AllocateHost(DType::kFloat32, {256, 1024});
  std::fill_n(static_cast<float*>(ones.data()), 256 * 1024, 1.0f);
  std::vector<double> micros;
  for (int it = 0; it < iterations; ++it) {
    DistAutogradContext context(&client);
    bool ok = true;
    micros.push_back(
        1e6 * bench::SecondsOf([&] {
          absl::StatusOr<Variable> y = layer.Forward(context, Variable{x, -1});
          ok = y.ok() && context.Backward(*y, ones).ok();
        }));
    if (!ok) std::exit(1);
  }
  for (const RemoteParameter& p : layer.parameters()) {
    client.DeleteParameter(p).IgnoreError();
  }
  return bench::Percentile(micros, 0.5);
}

}  // namespace
}  // namespace distopt

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: cpp_step_probe ITERATIONS WORKER...\n");
    return 2;
  }
  const int iterations = std::atoi(argv[1]);
  std::vector<std::string> workers(argv + 2, argv + argc);
  distopt::Client client;
  std::printf("step_p50_us %.2f\n",
              distopt::StepP50(client, workers, iterations));
  std::printf("linear_p50_us %.2f\n",
              distopt::LinearP50(client, workers[0], iterations / 10 + 5));
  return 0;
}
