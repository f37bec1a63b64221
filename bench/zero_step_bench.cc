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
#include "absl/time/clock.h"
#include "bench/data_parallel_ranks.h"
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

std::string Bytes(const std::vector<int64_t>& per_rank) {
  std::string text;
  for (int64_t bytes : per_rank) {
    absl::StrAppend(&text, text.empty() ? "" : " / ", bytes / (1 << 20),
                    " MiB");
  }
  return text;
}

void Run() {
  Client client;
  const int64_t model_bytes = int64_t{kLayers} * kSize * kSize * 4;
  const int64_t unsharded_state = 2 * model_bytes;  // Adam: two buffers.
  const auto torch = TorchPeer();
  const ZeroFigures per_parameter = RunZero(client, false, false);
  const ZeroFigures bucketed = RunZero(client, true, false);
  const ZeroFigures overlapped = RunZero(client, false, true);
  std::printf("model: %d x %lld x %lld fp32 (%lld MiB), Adam, %d ranks\n",
              kLayers, static_cast<long long>(kSize),
              static_cast<long long>(kSize),
              static_cast<long long>(model_bytes >> 20), kWorld);
  auto torch_zero = torch.find("zero");
  for (const auto& [name, figures] :
       {std::make_pair("ZeRO, per-parameter broadcast", per_parameter),
        std::make_pair("ZeRO, bucket view", bucketed),
        std::make_pair("ZeRO, overlap", overlapped)}) {
    std::printf(
        "distopt %-30s step %.3f s  optimizer state per rank %s "
        "(%.2f of unsharded; goal %.2f)\n",
        name, figures.step_s, Bytes(figures.state_bytes).c_str(),
        figures.state_bytes.empty()
            ? 0.0
            : static_cast<double>(*std::max_element(
                  figures.state_bytes.begin(), figures.state_bytes.end())) /
                  unsharded_state,
        1.0 / kWorld);
    if (torch_zero != torch.end()) {
      std::printf(
          "    vs torch ZeroRedundancyOptimizer all-reduce + step %.3f s"
          ": torch/distopt %.2fx (goal >= 1)\n",
          torch_zero->second.allreduce_and_step_s,
          torch_zero->second.allreduce_and_step_s / figures.step_s);
    }
  }
  if (torch_zero != torch.end()) {
    std::printf(
        "torch   ZeroRedundancyOptimizer        step alone %.3f s, "
        "with the all-reduce %.3f s, state per rank %s\n",
        torch_zero->second.step_s, torch_zero->second.allreduce_and_step_s,
        Bytes(torch_zero->second.state_bytes).c_str());
  } else {
    std::printf("torch: not available (set DISTOPT_TORCH_PYTHON)\n");
  }
  const double plain = RunPlain(client);
  std::printf(
      "distopt plain Adam, whole model per rank  step %.3f s "
      "(no all-reduce)  state per rank %lld MiB\n",
      plain, static_cast<long long>(unsharded_state >> 20));
  auto torch_plain = torch.find("plain");
  if (torch_plain != torch.end()) {
    std::printf(
        "torch   plain Adam                     step alone %.3f s "
        "(torch/distopt %.2fx), state per rank %s\n",
        torch_plain->second.step_s, torch_plain->second.step_s / plain,
        Bytes(torch_plain->second.state_bytes).c_str());
  }
}

}  // namespace
}  // namespace distopt

int main() {
  distopt::Run();
  return 0;
}
