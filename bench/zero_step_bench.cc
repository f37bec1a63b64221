// ZeroRedundancyOptimizer on 2 ranks (two daemons joined over loopback)
// with the seed tutorial's model, 20 linear weights of 2000 x 2000 and Adam:
// step time and per-rank optimizer memory, with ZeRO (per-parameter
// broadcast, and bucket view with overlap) and without it (a plain Adam over
// the whole model on each rank), against PyTorch's ZeroRedundancyOptimizer
// and plain Adam over gloo on the same machine in the same run
// (tools/bench/torch_zero_step.py). Goals: per-rank optimizer memory 1/W of
// the unsharded optimizer's; step time no worse than PyTorch's.
//
//   bazel run -c opt //bench:zero_step_bench
//   bazel run -c opt //bench:zero_step_bench --
//   --benchmark_filter=BM_ZeroStep/1
//
// Cases: BM_ZeroStep/0 (per-parameter broadcast), /1 (bucket view), /2
// (overlap), BM_PlainAdam. Counters: each rank's optimizer state, its share
// of the unsharded state, and the PyTorch peer's figures; a goal line per
// case follows the table.
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
#include "bench/summary_reporter.h"
#include "benchmark/benchmark.h"
#include "client/client.h"
#include "client/data_parallel.h"
#include "client/local_worker.h"

namespace distopt {
namespace {

using bench::kIterations;
using bench::kLayers;
using bench::kSize;
using bench::kWorld;
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
  std::vector<int64_t> state_bytes;
};

ZeroFigures RunZero(Client& client, bool bucket_view, bool overlap) {
  ZeroFigures figures;
  Ranks ranks;
  if (!StartRanks(client, ranks)) return figures;
  v1::CreateZeroRequest spec;
  spec.set_kind("adam");
  spec.set_timeout_ms(600000);
  spec.set_parameters_as_bucket_view(bucket_view);
  spec.set_overlap(overlap);
  v1::ZeroParamGroup* group = spec.add_groups();
  (*group->mutable_hyperparameters())["lr"].set_number(1e-3);
  for (int layer = 0; layer < kLayers; ++layer) {
    group->add_parameter_names(absl::StrCat("layer", layer, ".weight"));
  }
  std::vector<RemoteZero> zero;
  for (const std::string& address : ranks.addresses) {
    zero.emplace_back(&client, address);
  }
  if (!OnEveryRank([&](int r) { return zero[r].Create(spec).status(); })) {
    return figures;
  }
  figures.step_s =
      TimeSteps([&](int r) { return zero[r].Step(ranks.context_id); });
  // Every rank's state bytes, from one call.
  absl::StatusOr<v1::ZeroInfo> info = zero[0].Get();
  if (info.ok()) {
    for (const v1::ZeroRankBytes& rank : info->ranks()) {
      figures.state_bytes.push_back(rank.state_bytes());
    }
  }
  return figures;
}

// Without ZeRO: each rank steps a plain Adam over the whole model (no
// all-reduce; its state is the whole model's, two fp32 buffers per weight).
double RunPlain(Client& client) {
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
  // gets a new context with the same gradients (filled outside the timing).
  return TimeSteps(
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
      [&] { return PushGradients(client, ranks); });
}

constexpr int64_t kModelBytes = int64_t{kLayers} * kSize * kSize * 4;
constexpr int64_t kUnshardedState = 2 * kModelBytes;  // Adam: two buffers.

// The PyTorch peer's figures, run once, when a case first needs them.
const std::map<std::string, TorchFigures>& Torch() {
  static const auto* figures =
      new std::map<std::string, TorchFigures>(TorchPeer());
  return *figures;
}

// Arguments of BM_ZeroStep: 0 per-parameter broadcast, 1 bucket view,
// 2 overlap. Each case starts its own two ranks; the manual time is the
// median step (bench::TimeSteps), so one iteration suffices.
void BM_ZeroStep(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  Client client;
  ZeroFigures figures;
  for (auto _ : state) {
    figures = RunZero(client, /*bucket_view=*/mode == 1, /*overlap=*/mode == 2);
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
  }
  state.counters["state_of_unsharded"] =
      static_cast<double>(*std::max_element(figures.state_bytes.begin(),
                                            figures.state_bytes.end())) /
      kUnshardedState;
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
  state.SetLabel(mode == 0   ? "ZeRO, per-parameter broadcast"
                 : mode == 1 ? "ZeRO, bucket view"
                             : "ZeRO, overlap");
}
BENCHMARK(BM_ZeroStep)
    ->DenseRange(0, 2)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Without ZeRO, for reference: a plain Adam over the whole model per rank.
void BM_PlainAdam(benchmark::State& state) {
  Client client;
  double seconds = -1;
  for (auto _ : state) {
    seconds = RunPlain(client);
    if (seconds < 0) {
      state.SkipWithError("the ranks did not step (see the daemons' log)");
      return;
    }
    state.SetIterationTime(seconds);
  }
  state.counters["state_MiB_rank0"] =
      static_cast<double>(kUnshardedState) / (1 << 20);
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

// A line per case: the step and each rank's state against the goals and
// the PyTorch peer.
void Summary(const std::vector<bench::BenchmarkRun>& runs) {
  std::printf("model: %d x %lld x %lld fp32 (%lld MiB), Adam, %d ranks\n",
              kLayers, static_cast<long long>(kSize),
              static_cast<long long>(kSize),
              static_cast<long long>(kModelBytes >> 20), kWorld);
  for (const bench::BenchmarkRun& run : runs) {
    auto value = [&](const char* name) { return bench::Counter(run, name); };
    const bool sharded = value("state_of_unsharded") >= 0;
    std::string line = absl::StrFormat(
        "distopt %-48s step %.3f s  state per rank %.0f MiB", run.report_label,
        run.GetAdjustedRealTime() / 1e3, value("state_MiB_rank0"));
    if (sharded) {
      line += absl::StrFormat(" (%.2f of unsharded; goal %.2f)",
                              value("state_of_unsharded"), 1.0 / kWorld);
    }
    if (value("torch_s") < 0) {
      line += "  torch: not available";
    } else {
      line += absl::StrFormat("  torch %.3f s: torch/distopt %.2fx%s",
                              value("torch_s"), value("torch_ratio"),
                              sharded ? " (goal >= 1)" : "");
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace
}  // namespace distopt

int main(int argc, char** argv) {
  return distopt::bench::RunBenchmarks(argc, argv, distopt::Summary);
}
