// Optimizer step throughput on 64M fp32 parameters (64 tensors of 1M): on
// the CPU, bytes moved per second against memcpy bandwidth measured in the
// same run (goal: at least 0.7); on a GPU (when there is one), against
// device-to-device copy bandwidth (goal: at least 0.85). Both also against
// torch.optim's foreach implementation on the same sizes (goal: faster).
//
//   bazel run -c opt //bench:optimizer_step_bench
//   bazel run -c opt //bench:optimizer_step_bench -- \
//       --benchmark_filter='BM_OptimizerStep/0/'     # Adam only
//
// Arguments of BM_OptimizerStep: workload (0 adam, 1 sgd_momentum,
// 2 adagrad), device (0 cpu, 1 cuda:0; skipped without a GPU). Counters:
// the best step, the copy bandwidth and the ratio to it, the torch peer's
// step and our speedup; a goal line per case follows the table.
//
// The torch peer needs Debian's python3-torch (tools/install_deps.sh
// --with-torch); without it only the bandwidth ratios are printed.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/summary_reporter.h"
#include "bench/timing.h"
#include "benchmark/benchmark.h"
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

const Workload kWorkloads[] = {
    // Arrays per element: Adam reads p, g, m, v and writes p, m, v; SGD
    // with momentum and Adagrad read p, g, buf and write p, buf.
    {"adam", "adam", {{"lr", 1e-3}}, 7},
    {"sgd_momentum", "sgd", {{"lr", 1e-2}, {"momentum", 0.9}}, 5},
    {"adagrad", "adagrad", {{"lr", 1e-2}}, 5},
};

// The copy bandwidth a step is held against: memcpy on the host threads,
// or a device-to-device copy. Measured once per device, outside any timing.
double CopyBandwidth(const Device& device, Backend& backend) {
  static auto* measured = new std::map<std::string, double>;
  auto [it, added] = measured->try_emplace(device.ToString(), 0.0);
  if (added) {
    it->second =
        device.is_cpu() ? MemcpyBandwidth() : DeviceCopyBandwidth(backend);
  }
  return it->second;
}

// Arguments: workload (kWorkloads), device (0: cpu, 1: cuda:0).
void BM_OptimizerStep(benchmark::State& state) {
  const Workload& w = kWorkloads[state.range(0)];
  const Device device = state.range(1) == 0 ? Device::Cpu() : Device::Cuda(0);
  absl::StatusOr<std::shared_ptr<Backend>> backend = GetBackend(device);
  if (!backend.ok()) {
    state.SkipWithError(absl::StrCat(device.ToString(), ": skipped (",
                                     backend.status().message(), ")")
                            .c_str());
    return;
  }
  static auto* registry = OptimizerRegistry::WithBuiltins().release();
  std::vector<ParameterLayout> layouts(kTensors,
                                       {DType::kFloat32, {kElements}});
  auto optimizer = *FunctionalOptimizer::Create(
      *registry->Find(w.kind), w.hyperparameters, layouts, device);
  std::vector<Tensor> params, grads;
  std::vector<Tensor*> param_ptrs;
  std::vector<const Tensor*> grad_ptrs;
  for (int64_t t = 0; t < kTensors; ++t) {
    params.push_back(*Tensor::Allocate(*backend, DType::kFloat32, {kElements}));
    grads.push_back(*Tensor::Allocate(*backend, DType::kFloat32, {kElements}));
    (*backend)
        ->Fill(params.back().data(), DType::kFloat32, kElements, 0.0)
        .IgnoreError();
    (*backend)
        ->Fill(grads.back().data(), DType::kFloat32, kElements, 0.01)
        .IgnoreError();
  }
  for (int64_t t = 0; t < kTensors; ++t) {
    param_ptrs.push_back(&params[t]);
    grad_ptrs.push_back(&grads[t]);
  }
  const double bandwidth = CopyBandwidth(device, **backend);
  optimizer->Step(param_ptrs, grad_ptrs).IgnoreError();  // Creates the state.
  const double bytes =
      static_cast<double>(w.arrays_touched) * kTensors * kElements * 4;
  std::vector<double> seconds;
  for (auto _ : state) {
    bool ok = false;
    seconds.push_back(bench::SecondsOf(
        [&] { ok = optimizer->Step(param_ptrs, grad_ptrs).ok(); }));
    if (!ok) {
      state.SkipWithError("the step failed");
      return;
    }
  }
  // The best step, as the bandwidth figure (the VM's noise only adds).
  const double best = *std::min_element(seconds.begin(), seconds.end());
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  state.counters["best_ms"] = best * 1e3;
  state.counters["copy_GBps"] = bandwidth / 1e9;
  state.counters["copy_ratio"] = bytes / best / bandwidth;
  const double torch = TorchSecondsPerStep(w.name, device);
  if (torch > 0) {
    state.counters["torch_ms"] = torch * 1e3;
    state.counters["torch_speedup"] = torch / best;
  }
  state.SetLabel(absl::StrCat(device.ToString(), " ", w.name));
}
BENCHMARK(BM_OptimizerStep)
    ->ArgsProduct({{0, 1, 2}, {0, 1}})
    ->UseRealTime()
    ->Iterations(kSteps)  // One run per case: each allocates 1 GiB or more.
    ->Unit(benchmark::kMillisecond);

// A line per case: the step against copy bandwidth and the PyTorch peer.
void Summary(const std::vector<bench::BenchmarkRun>& runs) {
  for (const bench::BenchmarkRun& run : runs) {
    auto value = [&](const char* name) { return bench::Counter(run, name); };
    const bool cpu = run.report_label.rfind("cpu", 0) == 0;
    std::string line = absl::StrFormat(
        "%-18s step %8.2f ms  %.2f x %s bandwidth (%.1f GB/s; goal >= %.2f)",
        run.report_label, value("best_ms"), value("copy_ratio"),
        cpu ? "memcpy" : "device copy", value("copy_GBps"), cpu ? 0.7 : 0.85);
    if (value("torch_ms") < 0) {
      line += "  torch: not available";
    } else {
      line +=
          absl::StrFormat("  torch foreach %8.2f ms  speedup %.2fx (goal > 1)",
                          value("torch_ms"), value("torch_speedup"));
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace
}  // namespace distopt

int main(int argc, char** argv) {
  return distopt::bench::RunBenchmarks(argc, argv, distopt::Summary);
}
