// Optimizer step throughput on 64M fp32 parameters (64 tensors of 1M): on
// the CPU, bytes moved per second against memcpy bandwidth measured in the
// same run (goal: at least 0.7); on a GPU (when there is one), against
// device-to-device copy bandwidth (goal: at least 0.85). Both also against
// torch.optim's foreach implementation on the same sizes (goal: faster).
//
//   bazel run -c opt //bench:optimizer_step_bench
//
// The torch peer needs Debian's python3-torch (tools/install_deps.sh
// --with-torch); without it only the bandwidth ratios are printed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/timing.h"
#include "common/tensor.h"
#include "common/thread_pool.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/registry.h"

namespace distopt {
namespace {

constexpr int64_t kTensors = 64;
constexpr int64_t kElements = int64_t{1} << 20;
constexpr int kSteps = 10;

// Seconds per call of `work`, best of `rounds` rounds of `repeat` calls.
template <typename Work>
double BestSeconds(int rounds, int repeat, Work work) {
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    best = std::min(best, bench::SecondsOf([&] {
                            for (int i = 0; i < repeat; ++i) work();
                          }) / repeat);
  }
  return best;
}

// Memory bandwidth (bytes read + written per second) of memcpy over all
// the tensors, the same total size as the parameters, split across the same
// threads as the optimizer's loops.
double MemcpyBandwidth() {
  std::vector<std::vector<float>> from(kTensors,
                                       std::vector<float>(kElements, 1.0f));
  std::vector<std::vector<float>> to(kTensors,
                                     std::vector<float>(kElements, 0.0f));
  const double seconds = BestSeconds(3, 3, [&] {
    for (int64_t t = 0; t < kTensors; ++t) {
      ThreadPool::Default().ParallelFor(
          kElements, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
            std::memcpy(to[t].data() + begin, from[t].data() + begin,
                        (end - begin) * sizeof(float));
          });
    }
  });
  return 2.0 * kTensors * kElements * sizeof(float) / seconds;
}

struct Workload {
  std::string name;  // For the torch peer.
  std::string kind;  // Registry name.
  absl::flat_hash_map<std::string, HyperValue> hyperparameters;
  int arrays_touched;  // fp32 arrays read or written per element.
};

// Device-to-device copy bandwidth (bytes read + written per second).
double DeviceCopyBandwidth(Backend& gpu) {
  Tensor from = *Tensor::Allocate(*GetBackend(gpu.device()), DType::kFloat32,
                                  {kTensors * kElements});
  Tensor to = *Tensor::Allocate(*GetBackend(gpu.device()), DType::kFloat32,
                                {kTensors * kElements});
  const double seconds = BestSeconds(3, 5, [&] {
    gpu.CopyWithinDevice(to.data(), from.data(), from.byte_size())
        .IgnoreError();
  });
  return 2.0 * from.byte_size() / seconds;
}

double TorchSecondsPerStep(const std::string& name, const Device& device) {
  // Debian's python3 holds Debian's torch; elsewhere set DISTOPT_TORCH_PYTHON.
  const char* python = std::getenv("DISTOPT_TORCH_PYTHON");
  const std::string command =
      absl::StrCat(python != nullptr ? python : "/usr/bin/python3",
                   " tools/bench/torch_optimizer_step.py ", name, " ", kTensors,
                   " ", kElements, " ", kSteps, " ",
                   device.is_cpu() ? "cpu" : "cuda", " 2>/dev/null");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return 0;
  char line[256] = {0};
  double seconds = 0;
  if (fgets(line, sizeof(line), pipe) != nullptr) {
    std::sscanf(line, "seconds_per_step=%lf", &seconds);
  }
  pclose(pipe);
  return seconds;
}

void Run(const Workload& w, const Device& device, double bandwidth, double goal,
         const OptimizerRegistry& registry) {
  std::shared_ptr<Backend> backend = *GetBackend(device);
  std::vector<ParameterLayout> layouts(kTensors,
                                       {DType::kFloat32, {kElements}});
  auto optimizer = *FunctionalOptimizer::Create(
      *registry.Find(w.kind), w.hyperparameters, layouts, device);
  std::vector<Tensor> params, grads;
  std::vector<Tensor*> param_ptrs;
  std::vector<const Tensor*> grad_ptrs;
  for (int64_t t = 0; t < kTensors; ++t) {
    params.push_back(*Tensor::Allocate(backend, DType::kFloat32, {kElements}));
    grads.push_back(*Tensor::Allocate(backend, DType::kFloat32, {kElements}));
    backend->Fill(params.back().data(), DType::kFloat32, kElements, 0.0)
        .IgnoreError();
    backend->Fill(grads.back().data(), DType::kFloat32, kElements, 0.01)
        .IgnoreError();
  }
  for (int64_t t = 0; t < kTensors; ++t) {
    param_ptrs.push_back(&params[t]);
    grad_ptrs.push_back(&grads[t]);
  }
  optimizer->Step(param_ptrs, grad_ptrs).IgnoreError();  // Creates the state.
  const double seconds = BestSeconds(3, kSteps / 3 + 1, [&] {
    optimizer->Step(param_ptrs, grad_ptrs).IgnoreError();
  });
  const double bytes =
      static_cast<double>(w.arrays_touched) * kTensors * kElements * 4;
  std::printf(
      "%-5s %-13s step %8.2f ms  %7.2f GB/s  %.2f of copy (goal >= %.2f)",
      device.ToString().c_str(), w.name.c_str(), seconds * 1e3,
      bytes / seconds / 1e9, bytes / seconds / bandwidth, goal);
  const double torch = TorchSecondsPerStep(w.name, device);
  if (torch > 0) {
    std::printf("  torch foreach %8.2f ms  speedup %.2fx (goal > 1)\n",
                torch * 1e3, torch / seconds);
  } else {
    std::printf("  torch: not available\n");
  }
}

}  // namespace
}  // namespace distopt

int main() {
  using distopt::Workload;
  auto registry = distopt::OptimizerRegistry::WithBuiltins();
  const double bandwidth = distopt::MemcpyBandwidth();
  std::printf("64M fp32 parameters in 64 tensors; memcpy %.2f GB/s\n",
              bandwidth / 1e9);
  // Arrays per element: Adam reads p, g, m, v and writes p, m, v; SGD with
  // momentum and Adagrad read p, g, buf and write p, buf.
  const Workload workloads[] = {
      {"adam", "adam", {{"lr", 1e-3}}, 7},
      {"sgd_momentum", "sgd", {{"lr", 1e-2}, {"momentum", 0.9}}, 5},
      {"adagrad", "adagrad", {{"lr", 1e-2}}, 5},
  };
  for (const Workload& w : workloads) {
    distopt::Run(w, distopt::Device::Cpu(), bandwidth, 0.7, *registry);
  }
  absl::StatusOr<std::shared_ptr<distopt::Backend>> gpu =
      distopt::GetBackend(distopt::Device::Cuda(0));
  if (!gpu.ok()) {
    std::printf("cuda: skipped (%s)\n",
                std::string(gpu.status().message()).c_str());
    return 0;
  }
  const double device_bandwidth = distopt::DeviceCopyBandwidth(**gpu);
  std::printf("cuda:0 device-to-device copy %.1f GB/s\n",
              device_bandwidth / 1e9);
  for (const Workload& w : workloads) {
    distopt::Run(w, distopt::Device::Cuda(0), device_bandwidth, 0.85,
                 *registry);
  }
  return 0;
}
