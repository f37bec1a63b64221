// Post-local SGD on 2 ranks (two daemons joined over loopback) with 80M
// fp32 parameters (20 x 2000 x 2000): the time to average the parameters
// across the ranks, against PyTorch's PeriodicModelAverager over gloo on the
// same machine in the same run (tools/bench/torch_model_averaging.py; goal:
// faster) and against the limit, gloo's all-reduce of the same bytes with
// nothing around it, timed between the steps (bench/raw_collectives.h;
// goal: at most 1.2 x), and
// what period 4 saves over an all-reduce of the gradients at
// every step (the bytes, and the time of 4 steps either way).
//
//   bazel run -c opt //bench:local_sgd_bench
//   bazel run -c opt //bench:local_sgd_bench -- --benchmark_filter=Averaging
//
// Cases: BM_Averaging, BM_FourSteps/0 (all-reduce every step), /1 (period
// 4). Each starts its own two ranks; a summary follows the table.
//
// Each rank's gradients sit in one context, stepped again and again (a
// post-local SGD step does not consume them). Averaging time: with period 2
// and no gradient reduction, the median of the steps that average minus
// the median of those that do not (both take one plain SGD step).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/data_parallel_ranks.h"
#include "bench/raw_collectives.h"
#include "bench/summary_reporter.h"
#include "benchmark/benchmark.h"
#include "client/data_parallel.h"

namespace distopt {
namespace {

using bench::kLayers;
using bench::kSize;
using bench::Median;
using bench::OnEveryRank;
using bench::Ranks;
using bench::SecondsOf;
using bench::StartRanks;

constexpr int kSteps = 12;

std::map<std::string, double> TorchPeer() {
  const char* python = std::getenv("DISTOPT_TORCH_PYTHON");
  const std::string command =
      absl::StrCat(python != nullptr ? python : "/usr/bin/python3",
                   " tools/bench/torch_model_averaging.py ", bench::kWorld, " ",
                   kLayers, " ", kSize, " 5 2>/dev/null");
  std::map<std::string, double> result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char name[64];
  double seconds = 0;
  while (std::fscanf(pipe, "%63s %lf", name, &seconds) == 2) {
    result[name] = seconds;
  }
  pclose(pipe);
  return result;
}

// Seconds of each of kSteps steps (both ranks at once) of a post-local SGD
// made with `spec`; empty on failure. With `raw`, its collectives are timed
// before each step (counted from step 2 on, as the steps are).
std::vector<double> StepTimes(Client& client,
                              v1::CreatePostLocalSgdRequest spec,
                              bench::RawCollectiveRanks* raw = nullptr) {
  Ranks ranks;
  if (!StartRanks(client, ranks)) return {};
  spec.set_kind("sgd");
  spec.set_timeout_ms(600000);
  v1::ZeroParamGroup* group = spec.add_groups();
  (*group->mutable_hyperparameters())["lr"].set_number(1e-3);
  for (int layer = 0; layer < kLayers; ++layer) {
    group->add_parameter_names(absl::StrCat("layer", layer, ".weight"));
  }
  std::vector<RemoteLocalSgd> local_sgd;
  for (const std::string& address : ranks.addresses) {
    local_sgd.emplace_back(&client, address);
  }
  if (!OnEveryRank([&](int r) { return local_sgd[r].Create(spec).status(); })) {
    return {};
  }
  std::vector<double> seconds;
  for (int s = 0; s < kSteps; ++s) {
    // A failed limit leaves its figure out, not the steps'.
    if (raw != nullptr) raw->Time(s >= 2);
    bool stepped = false;
    seconds.push_back(SecondsOf([&] {
      stepped = OnEveryRank(
          [&](int r) { return local_sgd[r].Step(ranks.context_id).status(); });
    }));
    if (!stepped) return {};
  }
  return seconds;
}

const double kModelMib =
    static_cast<double>(kLayers) * kSize * kSize * 4 / (1 << 20);

const std::map<std::string, double>& Torch() {
  static const auto* figures = new std::map<std::string, double>(TorchPeer());
  return *figures;
}

// The averaging time: period 2 and no gradient reduction, so even steps
// average and odd ones do not; the median of the first minus the median of
// the second (both take one plain SGD step). Two warm-up steps.
void BM_Averaging(benchmark::State& state) {
  Client client;
  v1::CreatePostLocalSgdRequest alternate;
  alternate.mutable_periodic()->set_period(2);
  alternate.set_no_post_local_gradient_allreduce(true);
  double averaging = 0;
  std::vector<double> averaging_steps, plain_steps;
  // The limit, the raw all-reduce of the model's bytes, timed between the
  // steps: whatever slows this machine meanwhile slows both alike.
  bench::RawCollectiveRanks raw(bench::kWorld, bench::Model().elements());
  for (auto _ : state) {
    const std::vector<double> seconds = StepTimes(client, alternate, &raw);
    if (seconds.empty()) {
      state.SkipWithError("the ranks did not step (see the daemons' log)");
      return;
    }
    for (int s = 2; s < kSteps; ++s) {
      (s % 2 == 0 ? averaging_steps : plain_steps).push_back(seconds[s]);
    }
    averaging = Median(averaging_steps) - Median(plain_steps);
    state.SetIterationTime(std::max(averaging, 0.0));
  }
  const double raw_all_reduce = raw.Medians().all_reduce;
  if (raw_all_reduce > 0) {
    state.counters["raw_allreduce_s"] = raw_all_reduce;
    state.counters["of_raw_allreduce"] = averaging / raw_all_reduce;
  }
  state.counters["step_with_averaging_s"] = Median(averaging_steps);
  state.counters["step_without_s"] = Median(plain_steps);
  auto torch = Torch().find("averaging");
  if (torch != Torch().end()) {
    state.counters["torch_s"] = torch->second;
    state.counters["torch_ratio"] = torch->second / averaging;
  }
  state.SetLabel("averaging the parameters");
}
BENCHMARK(BM_Averaging)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Four steps after warm-up (steps 4..7): /0 with a gradient all-reduce at
// every step and no averaging (data parallelism), /1 post-local SGD with
// period 4 and no gradient reduction.
void BM_FourSteps(benchmark::State& state) {
  const bool local = state.range(0) == 1;
  Client client;
  v1::CreatePostLocalSgdRequest spec;
  if (local) {
    spec.mutable_periodic()->set_period(4);
    spec.set_no_post_local_gradient_allreduce(true);
  } else {
    spec.mutable_periodic()->set_period(1000000);
    spec.mutable_periodic()->set_warmup_steps(1000000);
    spec.set_start_localsgd_iter(1000000);
  }
  for (auto _ : state) {
    const std::vector<double> seconds = StepTimes(client, spec);
    if (seconds.empty()) {
      state.SkipWithError("the ranks did not step (see the daemons' log)");
      return;
    }
    double four = 0;
    for (int s = 4; s < 8; ++s) four += seconds[s];
    state.SetIterationTime(four);
  }
  state.counters["allreduced_MiB_per_rank"] = (local ? 1 : 4) * kModelMib;
  auto torch = Torch().find("gradient_allreduce");
  if (!local && torch != Torch().end()) {
    state.counters["torch_4_allreduces_s"] = 4 * torch->second;
  }
  state.SetLabel(local ? "4 steps of post-local SGD, period 4"
                       : "4 steps with a gradient all-reduce each");
}
BENCHMARK(BM_FourSteps)
    ->DenseRange(0, 1)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// A line per case against the goal and the PyTorch peer, and what period 4
// saves over the all-reduce at every step.
void Summary(const std::vector<bench::BenchmarkRun>& runs) {
  std::printf("model: %d x %lld x %lld fp32 (%.0f MiB), 2 ranks\n", kLayers,
              static_cast<long long>(kSize), static_cast<long long>(kSize),
              kModelMib);
  double every_step = -1, local = -1;
  for (const bench::BenchmarkRun& run : runs) {
    auto value = [&](const char* name) { return bench::Counter(run, name); };
    const double seconds = run.GetAdjustedRealTime() / 1e3;
    std::string line =
        absl::StrFormat("distopt %-40s %.3f s", run.report_label, seconds);
    if (value("of_raw_allreduce") >= 0) {
      line +=
          absl::StrFormat("  %.2fx the raw all-reduce of %.3f s (goal <= 1.2)",
                          value("of_raw_allreduce"), value("raw_allreduce_s"));
    }
    if (value("torch_ratio") >= 0) {
      line += absl::StrFormat(
          "  torch PeriodicModelAverager %.3f s: torch/distopt %.2fx "
          "(goal > 1)",
          value("torch_s"), value("torch_ratio"));
    }
    if (value("allreduced_MiB_per_rank") >= 0) {
      line += absl::StrFormat(", %.0f MiB all-reduced per rank",
                              value("allreduced_MiB_per_rank"));
      (value("allreduced_MiB_per_rank") > kModelMib ? every_step : local) =
          seconds;
    }
    if (value("torch_4_allreduces_s") >= 0) {
      line += absl::StrFormat("  (torch: 4 flat gradient all-reduces %.3f s)",
                              value("torch_4_allreduces_s"));
    }
    std::printf("%s\n", line.c_str());
  }
  if (every_step >= 0 && local >= 0) {
    std::printf("period 4 saves 75%% of the bytes and %.3f s per 4 steps\n",
                every_step - local);
  }
}

}  // namespace
}  // namespace distopt

int main(int argc, char** argv) {
  return distopt::bench::RunBenchmarks(argc, argv, distopt::Summary);
}
