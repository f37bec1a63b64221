// ZeroRedundancyOptimizer on 2 ranks (two daemons joined over loopback)
// with the seed tutorial's model, 20 linear weights of 2000 x 2000 and Adam:
// step time and per-rank memory, with ZeRO in each mode and without it (a
// plain Adam over the whole model on each rank), against three peers in the
// same run: the limit, gloo's collectives on the model's bytes with nothing
// around them (bench/raw_collectives.h), timed between each case's own
// steps, and PyTorch's
// ZeroRedundancyOptimizer and plain Adam over gloo
// (tools/bench/torch_zero_step.py).
//
//   bazel run -c opt //bench:zero_step_bench
//   bazel run -c opt //bench:zero_step_bench --
//   --benchmark_filter=BM_ZeroStep/3
//
// Cases: BM_ZeroStep/0 (per-parameter broadcast), /1 (bucket view), /2
// (overlap), /3 (gradient-sharded), /4 (gradient-sharded with overlap: on
// host memory, where this model's gradients are reduced in place, the
// same step as /3, kept as the mode users ask for; on cuda:0 its own);
// BM_PlainAdam; BM_ZeroSmallTensors/0 and /3 (200 parameters of 1024
// values, ZeRO-1 and gradient-sharded); BM_ZeroStepGpu/0 to /4, the modes
// with both ranks' parameters on cuda:0 (skipped without a GPU), against a
// device-to-device copy of the model's bytes. Counters: each rank's optimizer
// state, its peak memory above the parameters' (the daemon's VmHWM minus
// its RSS once the parameters were made: gradients, state and the step's
// scratch), the step as a multiple of the limit, and the PyTorch peer's
// figures; the summary after the table holds each against its goal.
//
// Each rank's gradients are put in one context before the timing; a timed
// step is one Step RPC on both ranks at once, which averages the gradients
// across ranks, steps the rank's partition and sends the updated
// parameters. PyTorch's step is timed with the gradient all-reduce that DDP
// would do before it, so both measure the same work (the step alone is
// printed too).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/data_parallel_ranks.h"
#include "bench/raw_collectives.h"
#include "bench/summary_reporter.h"
#include "benchmark/benchmark.h"
#include "client/client.h"
#include "client/data_parallel.h"
#include "client/local_worker.h"
#include "common/backend.h"

namespace distopt {
namespace {

using bench::kIterations;
using bench::kLayers;
using bench::kSize;
using bench::kWorld;
using bench::Model;
using bench::OnEveryRank;
using bench::PushGradients;
using bench::Ranks;
using bench::StartRanks;
using bench::TimeSteps;

struct TorchFigures {
  double step_s = 0;
  double allreduce_and_step_s = 0;
  std::vector<int64_t> state_bytes;
};

// "zero" and "plain" from the PyTorch peer; empty when it cannot run.
std::map<std::string, TorchFigures> TorchPeer() {
  const char* python = std::getenv("DISTOPT_TORCH_PYTHON");
  const std::string command =
      absl::StrCat(python != nullptr ? python : "/usr/bin/python3",
                   " tools/bench/torch_zero_step.py ", kWorld, " ", kLayers,
                   " ", kSize, " ", kIterations, " 2>/dev/null");
  std::map<std::string, TorchFigures> result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char mode[32];
  TorchFigures figures;
  while (std::fscanf(pipe, "%31s %lf %lf", mode, &figures.step_s,
                     &figures.allreduce_and_step_s) == 3) {
    figures.state_bytes.assign(kWorld, 0);
    for (int r = 0; r < kWorld; ++r) {
      long long bytes = 0;
      if (std::fscanf(pipe, "%lld", &bytes) == 1)
        figures.state_bytes[r] = bytes;
    }
    result[mode] = figures;
  }
  pclose(pipe);
  return result;
}

struct ZeroFigures {
  double step_s = -1;
  // The daemons' CPU seconds a step (warm-ups included), both ranks.
  double cpu_s = -1;
  std::vector<int64_t> state_bytes;
  std::vector<int64_t> scratch_bytes;
  std::vector<double> peak_above_parameters_mib;
  // The limit: the raw collectives of the model's bytes, timed between
  // the steps (bench::RawCollectiveRanks).
  bench::RawCollectiveSeconds limit;
};

// The modes of BM_ZeroStep.
enum Mode { kPerParameter, kBucketView, kOverlap, kSharded, kShardedOverlap };

const char* ModeLabel(int mode) {
  switch (mode) {
    case kPerParameter:
      return "ZeRO, per-parameter broadcast";
    case kBucketView:
      return "ZeRO, bucket view";
    case kOverlap:
      return "ZeRO, overlap";
    case kSharded:
      return "ZeRO, gradient-sharded";
    default:
      return "ZeRO, gradient-sharded, overlap";
  }
}

bool IsSharded(int mode) { return mode == kSharded || mode == kShardedOverlap; }

// Small models' steps take milliseconds: more of them steady the median.
// The large model's take about 0.4 s, and this VM's speed drifts between
// runs by more than a tenth: ten of them (and of the limit's collectives)
// still take seconds.
int Iterations(const Model& model) {
  return model.bytes() < (16 << 20) ? 100 : 2 * kIterations;
}

ZeroFigures RunZero(Client& client, int mode, const Model& model = Model(),
                    const std::string& device = "cpu") {
  ZeroFigures figures;
  Ranks ranks;
  if (!StartRanks(client, ranks, model, device)) return figures;
  v1::CreateZeroRequest spec;
  spec.set_kind("adam");
  spec.set_timeout_ms(600000);
  spec.set_parameters_as_bucket_view(mode == kBucketView);
  spec.set_overlap(mode == kOverlap || mode == kShardedOverlap);
  spec.set_gradient_sharded(IsSharded(mode));
  v1::ZeroParamGroup* group = spec.add_groups();
  (*group->mutable_hyperparameters())["lr"].set_number(1e-3);
  for (int layer = 0; layer < model.count; ++layer) {
    group->add_parameter_names(Model::Name(layer));
  }
  std::vector<RemoteZero> zero;
  for (const std::string& address : ranks.addresses) {
    zero.emplace_back(&client, address);
  }
  if (!OnEveryRank([&](int r) { return zero[r].Create(spec).status(); })) {
    return figures;
  }
  // The limit's collectives run before each step, the warm-up steps' and
  // the timed ones', so that the medians of both come from the same
  // stretch of the run.
  bench::RawCollectiveRanks raw(kWorld, model.elements());
  int raw_calls = 0;
  // CPU is counted over the timed steps only: the warm-up steps also make
  // the optimizer's state and the step's buffers (and fault their pages in).
  double cpu_before = 0;
  figures.step_s = TimeSteps(
      [&](int r) { return zero[r].Step(ranks.context_id); },
      [&] {
        // A failed limit leaves its figures out, not the step's.
        raw.Time(raw_calls++ >= bench::kWarmup);
        return true;
      },
      Iterations(model), [&] { cpu_before = bench::DaemonsCpuSeconds(ranks); });
  figures.limit = raw.Medians();
  figures.cpu_s =
      (bench::DaemonsCpuSeconds(ranks) - cpu_before) / Iterations(model);
  figures.peak_above_parameters_mib = bench::PeakAboveParametersMiB(ranks);
  // Every rank's bytes, from one call.
  absl::StatusOr<v1::ZeroInfo> info = zero[0].Get();
  if (info.ok()) {
    for (const v1::ZeroRankBytes& rank : info->ranks()) {
      figures.state_bytes.push_back(rank.state_bytes());
      figures.scratch_bytes.push_back(rank.scratch_bytes());
    }
  }
  return figures;
}

// Without ZeRO: each rank steps a plain Adam over the whole model (no
// all-reduce; its state is the whole model's, two fp32 buffers per weight).
// Returns the median step, and each daemon's peak above its parameters.
double RunPlain(Client& client, std::vector<double>* peak_above_parameters) {
  Ranks ranks;
  if (!StartRanks(client, ranks)) return -1;
  std::vector<uint64_t> optimizers(kWorld);
  if (!OnEveryRank([&](int r) -> absl::Status {
        auto info = client.CreateOptimizer(ranks.addresses[r], "adam",
                                           {{"lr", hyper::Number(1e-3)}},
                                           ranks.parameter_ids[r]);
        if (!info.ok()) return info.status();
        optimizers[r] = info->id();
        return absl::OkStatus();
      })) {
    return -1;
  }
  // A Step is applied once per (optimizer, context), so each timed step
  // gets a new context with the same gradients (filled outside the timing)
  // once the last one is released: one context of gradients at a time, as
  // a trainer holds.
  const double seconds = TimeSteps(
      [&](int r) -> absl::Status {
        auto stepped =
            client.Step(ranks.addresses[r], optimizers[r], ranks.context_id);
        if (!stepped.ok()) return stepped.status();
        if (!stepped->applied() || stepped->stepped_parameters() != kLayers) {
          return absl::InternalError(absl::StrCat(
              "the plain step applied ", stepped->stepped_parameters(),
              " parameters; expected ", kLayers));
        }
        return absl::OkStatus();
      },
      [&] {
        const uint64_t done = ranks.context_id;
        return OnEveryRank([&](int r) {
                 return client.ReleaseContext(ranks.addresses[r], done)
                     .status();
               }) &&
               PushGradients(client, ranks);
      });
  *peak_above_parameters = bench::PeakAboveParametersMiB(ranks);
  return seconds;
}

const int64_t kModelBytes = Model().bytes();
const int64_t kUnshardedState = 2 * kModelBytes;  // Adam: two buffers.

// The PyTorch peer's figures, run once, when a case first needs them.
const std::map<std::string, TorchFigures>& Torch() {
  static const auto* figures =
      new std::map<std::string, TorchFigures>(TorchPeer());
  return *figures;
}

// The step against the limit: the raw all-reduce (and, gradient-sharded,
// the raw reduce-scatter + all-gather) of the same bytes.
void SetLimitCounters(benchmark::State& state, const ZeroFigures& figures,
                      int mode) {
  const bench::RawCollectiveSeconds& limit = figures.limit;
  const double step_s = figures.step_s;
  if (limit.all_reduce <= 0) return;
  state.counters["raw_allreduce_s"] = limit.all_reduce;
  state.counters["of_raw_allreduce"] = step_s / limit.all_reduce;
  state.counters["raw_allreduce_cores"] = limit.all_reduce_cores;
  state.counters["raw_rs_ag_cores"] = limit.reduce_scatter_all_gather_cores;
  if (IsSharded(mode)) {
    state.counters["raw_rs_ag_s"] = limit.reduce_scatter_all_gather;
    state.counters["of_raw_rs_ag"] = step_s / limit.reduce_scatter_all_gather;
  }
}

void SetMemoryCounters(benchmark::State& state,
                       const std::vector<double>& peak_above_parameters_mib) {
  for (size_t r = 0; r < peak_above_parameters_mib.size(); ++r) {
    state.counters[absl::StrCat("peak_MiB_rank", r)] =
        peak_above_parameters_mib[r];
  }
  state.counters["peak_MiB"] = *std::max_element(
      peak_above_parameters_mib.begin(), peak_above_parameters_mib.end());
}

// Arguments of BM_ZeroStep: a Mode. Each case starts its own two ranks;
// the manual time is the median step (bench::TimeSteps), so one iteration
// suffices.
void BM_ZeroStep(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  Client client;
  ZeroFigures figures;
  for (auto _ : state) {
    figures = RunZero(client, mode);
    if (figures.step_s < 0 ||
        static_cast<int>(figures.state_bytes.size()) != kWorld) {
      state.SkipWithError("the ranks did not step (see the daemons' log)");
      return;
    }
    state.SetIterationTime(figures.step_s);
  }
  for (int r = 0; r < kWorld; ++r) {
    state.counters[absl::StrCat("state_MiB_rank", r)] =
        static_cast<double>(figures.state_bytes[r]) / (1 << 20);
    state.counters[absl::StrCat("scratch_MiB_rank", r)] =
        static_cast<double>(figures.scratch_bytes[r]) / (1 << 20);
  }
  state.counters["state_of_unsharded"] =
      static_cast<double>(*std::max_element(figures.state_bytes.begin(),
                                            figures.state_bytes.end())) /
      kUnshardedState;
  SetMemoryCounters(state, figures.peak_above_parameters_mib);
  SetLimitCounters(state, figures, mode);
  state.counters["cpu_s"] = figures.cpu_s;
  auto torch = Torch().find("zero");
  if (torch != Torch().end()) {
    state.counters["torch_s"] = torch->second.allreduce_and_step_s;
    state.counters["torch_step_alone_s"] = torch->second.step_s;
    state.counters["torch_ratio"] =
        torch->second.allreduce_and_step_s / figures.step_s;
    for (int r = 0; r < kWorld; ++r) {
      state.counters[absl::StrCat("torch_state_MiB_rank", r)] =
          static_cast<double>(torch->second.state_bytes[r]) / (1 << 20);
    }
  }
  state.SetLabel(ModeLabel(mode));
}
BENCHMARK(BM_ZeroStep)
    ->DenseRange(kPerParameter, kShardedOverlap)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Without ZeRO, for reference: a plain Adam over the whole model per rank.
void BM_PlainAdam(benchmark::State& state) {
  Client client;
  double seconds = -1;
  std::vector<double> peak;
  for (auto _ : state) {
    seconds = RunPlain(client, &peak);
    if (seconds < 0) {
      state.SkipWithError("the ranks did not step (see the daemons' log)");
      return;
    }
    state.SetIterationTime(seconds);
  }
  state.counters["state_MiB_rank0"] =
      static_cast<double>(kUnshardedState) / (1 << 20);
  SetMemoryCounters(state, peak);
  auto torch = Torch().find("plain");
  if (torch != Torch().end()) {
    state.counters["torch_s"] = torch->second.step_s;
    state.counters["torch_ratio"] = torch->second.step_s / seconds;
  }
  state.SetLabel("plain Adam, whole model per rank (no all-reduce)");
}
BENCHMARK(BM_PlainAdam)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// 200 parameters of 1024 values (800 KiB): what a step costs beyond the
// collectives when there are many small tensors (/0 ZeRO-1 with its
// per-parameter broadcast, /3 gradient-sharded).
const Model kSmallTensors{200, {1024}};

void BM_ZeroSmallTensors(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  Client client;
  ZeroFigures figures;
  for (auto _ : state) {
    figures = RunZero(client, mode, kSmallTensors);
    if (figures.step_s < 0) {
      state.SkipWithError("the ranks did not step (see the daemons' log)");
      return;
    }
    state.SetIterationTime(figures.step_s);
  }
  SetLimitCounters(state, figures, mode);
  state.SetLabel(absl::StrCat(ModeLabel(mode), ", 200 x 1K"));
}
BENCHMARK(BM_ZeroSmallTensors)
    ->Arg(kPerParameter)
    ->Arg(kSharded)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// The GPU half: both ranks' parameters on cuda:0 (they share it, so their
// group stages the tensors through page-locked host memory, "gloo-staged"),
// the step against a device-to-device copy of the model's bytes timed in
// the same run (the GPU's own memory bandwidth), and against the CPU raw
// all-reduce. Skipped without a GPU.
double DeviceCopySeconds(const Model& model) {
  absl::StatusOr<std::shared_ptr<Backend>> gpu = GetBackend(Device::Cuda(0));
  if (!gpu.ok()) return -1;
  absl::StatusOr<void*> from = (*gpu)->Allocate(model.bytes());
  absl::StatusOr<void*> to = (*gpu)->Allocate(model.bytes());
  if (!from.ok() || !to.ok()) return -1;
  std::vector<double> seconds;
  for (int it = 0; it < bench::kWarmup + kIterations; ++it) {
    const double taken = bench::SecondsOf([&] {
      (*gpu)->CopyWithinDevice(*to, *from, model.bytes()).IgnoreError();
    });
    if (it >= bench::kWarmup) seconds.push_back(taken);
  }
  (*gpu)->Free(*from);
  (*gpu)->Free(*to);
  return bench::Median(seconds);
}

void BM_ZeroStepGpu(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  absl::StatusOr<std::shared_ptr<Backend>> gpu = GetBackend(Device::Cuda(0));
  if (!gpu.ok()) {
    state.SkipWithError(
        absl::StrCat("no GPU: ", gpu.status().message()).c_str());
    return;
  }
  Client client;
  ZeroFigures figures;
  for (auto _ : state) {
    figures = RunZero(client, mode, Model(), "cuda:0");
    if (figures.step_s < 0) {
      state.SkipWithError("the ranks did not step (see the daemons' log)");
      return;
    }
    state.SetIterationTime(figures.step_s);
  }
  const double copy_s = DeviceCopySeconds(Model());
  if (copy_s > 0) {
    state.counters["d2d_copy_s"] = copy_s;
    state.counters["of_d2d_copy"] = figures.step_s / copy_s;
  }
  SetLimitCounters(state, figures, mode);
  state.SetLabel(absl::StrCat(ModeLabel(mode), ", on cuda:0 (gloo-staged)"));
}
BENCHMARK(BM_ZeroStepGpu)
    ->DenseRange(kPerParameter, kShardedOverlap)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// A line per case: the step against the limit and the PyTorch peer, each
// rank's state, and the memory against the plain Adam daemon's.
void Summary(const std::vector<bench::BenchmarkRun>& runs) {
  const double model_mib = static_cast<double>(kModelBytes) / (1 << 20);
  std::printf("model: %d x %lld x %lld fp32 (%.0f MiB), Adam, %d ranks\n",
              kLayers, static_cast<long long>(kSize),
              static_cast<long long>(kSize), model_mib, kWorld);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::printf(
      "limit: gloo's all-reduce, and reduce-scatter + all-gather, of the "
      "same bytes with nothing around them, timed between each case's "
      "steps\n");
  double plain_peak = -1, all_reduce_mode = -1;
  for (const bench::BenchmarkRun& run : runs) {
    if (run.run_name.function_name == "BM_PlainAdam") {
      plain_peak = bench::Counter(run, "peak_MiB");
    }
    if (run.run_name.function_name == "BM_ZeroStep" &&
        run.report_label == ModeLabel(kPerParameter)) {
      all_reduce_mode = run.GetAdjustedRealTime() / 1e3;
    }
  }
  // Gradients + state / W: what a ZeRO rank must hold beyond parameters.
  const double zero_floor = model_mib + 2 * model_mib / kWorld;
  for (const bench::BenchmarkRun& run : runs) {
    auto value = [&](const char* name) { return bench::Counter(run, name); };
    const double step = run.GetAdjustedRealTime() / 1e3;
    const bool zero = value("state_of_unsharded") >= 0;
    const bool sharded = value("of_raw_rs_ag") >= 0;
    std::string line =
        absl::StrFormat("distopt %-45s step %.4f s", run.report_label, step);
    if (value("of_raw_allreduce") >= 0) {
      line +=
          absl::StrFormat("  %.2fx the raw all-reduce (%.3g s)",
                          value("of_raw_allreduce"), value("raw_allreduce_s"));
      if (sharded) {
        line += absl::StrFormat(
            ", %.2fx the raw reduce-scatter + all-gather (%.3g s; goal <= "
            "1.1)",
            value("of_raw_rs_ag"), value("raw_rs_ag_s"));
        if (all_reduce_mode > 0 && value("peak_MiB") >= 0) {
          line += absl::StrFormat(" and %.2fx the all-reduce mode (goal < 1)",
                                  step / all_reduce_mode);
        }
      } else if (zero) {
        line += " (goal <= 1.3)";
      }
    }
    if (value("torch_s") >= 0) {
      line += absl::StrFormat("; torch %.3f s: torch/distopt %.2fx%s",
                              value("torch_s"), value("torch_ratio"),
                              zero ? " (goal >= 1.5)" : "");
    }
    std::printf("%s\n", line.c_str());
    if (value("cpu_s") > 0 && value("raw_allreduce_s") > 0) {
      // However the work overlaps, a step cannot take less than its CPU
      // seconds over the cores there are.
      const double floor_s = value("cpu_s") / cores;
      std::printf(
          "    CPU: %.3f s a step (both daemons), so at least %.3f s on %u "
          "cores = %.2fx the raw all-reduce%s; the raw collectives kept "
          "%.2f and %.2f cores busy\n",
          value("cpu_s"), floor_s, cores, floor_s / value("raw_allreduce_s"),
          sharded
              ? absl::StrFormat(", %.2fx the raw reduce-scatter + all-gather",
                                floor_s / value("raw_rs_ag_s"))
                    .c_str()
              : "",
          value("raw_allreduce_cores"), value("raw_rs_ag_cores"));
    }
    if (value("peak_MiB") >= 0) {
      std::string memory = absl::StrFormat(
          "    peak above the parameters %.0f MiB", value("peak_MiB"));
      if (zero) {
        memory += absl::StrFormat(
            " (%.2fx gradients + state/W = %.0f MiB; goal <= 1.1)",
            value("peak_MiB") / zero_floor, zero_floor);
        if (plain_peak > 0) {
          memory += absl::StrFormat(", %.2f of plain Adam's (goal <= 0.75)",
                                    value("peak_MiB") / plain_peak);
        }
        memory += absl::StrFormat(
            "; state %.0f MiB per rank (%.2f of unsharded), scratch %.1f MiB",
            value("state_MiB_rank0"), value("state_of_unsharded"),
            value("scratch_MiB_rank0"));
      }
      std::printf("%s\n", memory.c_str());
    }
  }
}

}  // namespace
}  // namespace distopt

int main(int argc, char** argv) {
  return distopt::bench::RunBenchmarks(argc, argv, distopt::Summary);
}
