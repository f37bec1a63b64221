// For the data-parallel benchmarks: two daemons joined as ranks over
// loopback, each holding the seed tutorial's model (20 linear weights of
// 2000 x 2000, fp32) with its own gradients in one autograd context, and
// helpers to run and time a call on both ranks at once.
#ifndef DISTOPT_BENCH_DATA_PARALLEL_RANKS_H_
#define DISTOPT_BENCH_DATA_PARALLEL_RANKS_H_

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/timing.h"
#include "client/client.h"
#include "client/local_worker.h"
#include "common/at_once.h"
#include "common/shape.h"

namespace distopt {
namespace bench {

inline constexpr int kWorld = 2;
inline constexpr int kLayers = 20;
inline constexpr int64_t kSize = 2000;
inline constexpr int kIterations = 5;
inline constexpr int kWarmup = 2;

// Runs call(rank) on both ranks at once; false if any failed.
inline bool OnEveryRank(const std::function<absl::Status(int)>& call) {
  const std::vector<absl::Status> results = AtOnce(kWorld, call);
  for (int r = 0; r < kWorld; ++r) {
    if (!results[r].ok()) {
      std::printf("rank %d: %s\n", r, results[r].ToString().c_str());
      return false;
    }
  }
  return true;
}

// The parameters each rank holds: `count` fp32 tensors of `shape`, named
// "layer<i>.weight". By default the seed tutorial's model.
struct Model {
  int count = kLayers;
  std::vector<int64_t> shape = {kSize, kSize};

  int64_t elements() const { return NumElements(shape) * count; }
  int64_t bytes() const { return elements() * 4; }
  static std::string Name(int index) {
    return absl::StrCat("layer", index, ".weight");
  }
};

// Two ranks holding the model, with one context of gradients each.
struct Ranks {
  Model model;
  std::vector<std::unique_ptr<LocalWorker>> daemons;
  std::vector<std::string> addresses;
  std::vector<std::vector<uint64_t>> parameter_ids;
  uint64_t context_id = 0;
  // Each daemon's RSS with only the parameters loaded (kB).
  std::vector<int64_t> parameters_rss_kb;
};

// How far each daemon's peak RSS rose above its RSS with only the
// parameters: what the step (gradients, state, scratch) costs, in MiB.
inline std::vector<double> PeakAboveParametersMiB(const Ranks& ranks) {
  std::vector<double> mib;
  for (size_t r = 0; r < ranks.daemons.size(); ++r) {
    const int64_t peak = ranks.daemons[r]->ProcStatus("VmHWM");
    mib.push_back(static_cast<double>(peak - ranks.parameters_rss_kb[r]) /
                  1024.0);
  }
  return mib;
}

inline Tensor RankGradient(int rank, const std::vector<int64_t>& shape) {
  Tensor gradient = *Tensor::AllocateHost(DType::kFloat32, shape);
  absl::Span<float> values = gradient.host_span<float>();
  for (size_t e = 0; e < values.size(); ++e) {
    values[e] = 1e-3f * static_cast<float>((e * 7 + rank * 13) % 17) - 8e-3f;
  }
  return gradient;
}

// Fills a new context on every rank with its gradients.
inline bool PushGradients(Client& client, Ranks& ranks) {
  ranks.context_id = client.NewContextId();
  return OnEveryRank([&](int r) -> absl::Status {
    const Tensor gradient = RankGradient(r, ranks.model.shape);
    for (uint64_t id : ranks.parameter_ids[r]) {
      absl::Status pushed = client.AccumulateGradients(
          ranks.addresses[r], ranks.context_id, {{id, gradient}});
      if (!pushed.ok()) return pushed;
    }
    return absl::OkStatus();
  });
}

// `device`: the daemons' --device (both on one GPU share it: their group
// stages its tensors through host memory).
inline bool StartRanks(Client& client, Ranks& ranks,
                       const Model& model = Model(),
                       const std::string& device = "cpu") {
  ranks.model = model;
  for (int r = 0; r < kWorld; ++r) {
    LocalWorkerOptions options;
    options.group_secret = "the secret of the benchmark's group";
    options.flags = {absl::StrCat("--rank=", r),
                     absl::StrCat("--world_size=", kWorld),
                     r == 0 ? "--rendezvous=127.0.0.1:1"
                            : "--rendezvous=" + ranks.addresses[0],
                     "--device=" + device};
    auto daemon = LocalWorker::Start(options);
    if (!daemon.ok()) {
      std::printf("cannot start rank %d: %s\n", r,
                  daemon.status().ToString().c_str());
      return false;
    }
    ranks.addresses.push_back((*daemon)->address());
    ranks.daemons.push_back(*std::move(daemon));
  }
  ranks.parameter_ids.resize(kWorld);
  const bool created = OnEveryRank([&](int r) -> absl::Status {
    for (int layer = 0; layer < model.count; ++layer) {
      auto parameter = client.CreateParameter(
          ranks.addresses[r], Model::Name(layer), DType::kFloat32, model.shape,
          init::Normal(0.0, 0.02, layer));
      if (!parameter.ok()) return parameter.status();
      ranks.parameter_ids[r].push_back(parameter->id);
    }
    return absl::OkStatus();
  });
  if (!created) return false;
  for (const auto& daemon : ranks.daemons) {
    // The peak so far (making the parameters) is not the step's.
    daemon->ResetPeakMemory();
    ranks.parameters_rss_kb.push_back(daemon->ProcStatus("VmRSS"));
  }
  return PushGradients(client, ranks);
}

// CPU seconds the ranks' daemons have used so far, all together.
inline double DaemonsCpuSeconds(const Ranks& ranks) {
  double seconds = 0;
  for (const auto& daemon : ranks.daemons) {
    seconds += ProcessCpuSeconds(daemon->pid());
  }
  return seconds;
}

// Median seconds of `iterations` timed calls after kWarmup, all ranks at
// once; `prepare` runs before each, untimed, and `warm` once, before the
// first timed one.
inline double TimeSteps(
    const std::function<absl::Status(int)>& step,
    const std::function<bool()>& prepare = [] { return true; },
    int iterations = kIterations, const std::function<void()>& warm = [] {}) {
  std::vector<double> seconds;
  for (int it = 0; it < kWarmup + iterations; ++it) {
    if (!prepare()) return -1;
    if (it == kWarmup) warm();
    bool stepped = false;
    const double taken = SecondsOf([&] { stepped = OnEveryRank(step); });
    if (!stepped) return -1;
    if (it >= kWarmup) seconds.push_back(taken);
  }
  return Median(seconds);
}

}  // namespace bench
}  // namespace distopt

#endif  // DISTOPT_BENCH_DATA_PARALLEL_RANKS_H_
