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
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/timing.h"
#include "client/client.h"
#include "client/local_worker.h"

namespace distopt {
namespace bench {

inline constexpr int kWorld = 2;
inline constexpr int kLayers = 20;
inline constexpr int64_t kSize = 2000;
inline constexpr int kIterations = 5;
inline constexpr int kWarmup = 2;

// Runs call(rank) on both ranks at once; false if any failed.
inline bool OnEveryRank(const std::function<absl::Status(int)>& call) {
  std::vector<absl::Status> results(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] { results[r] = call(r); });
  }
  for (std::thread& thread : threads) thread.join();
  for (int r = 0; r < kWorld; ++r) {
    if (!results[r].ok()) {
      std::printf("rank %d: %s\n", r, results[r].ToString().c_str());
      return false;
    }
  }
  return true;
}

// Two ranks holding the model, with one context of gradients each.
struct Ranks {
  std::vector<std::unique_ptr<LocalWorker>> daemons;
  std::vector<std::string> addresses;
  std::vector<std::vector<uint64_t>> parameter_ids;
  uint64_t context_id = 0;
};

inline Tensor RankGradient(int rank) {
  Tensor gradient = *Tensor::AllocateHost(DType::kFloat32, {kSize, kSize});
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
    const Tensor gradient = RankGradient(r);
    for (uint64_t id : ranks.parameter_ids[r]) {
      absl::Status pushed = client.AccumulateGradients(
          ranks.addresses[r], ranks.context_id, {{id, gradient}});
      if (!pushed.ok()) return pushed;
    }
    return absl::OkStatus();
  });
}

inline bool StartRanks(Client& client, Ranks& ranks) {
  for (int r = 0; r < kWorld; ++r) {
    LocalWorkerOptions options;
    options.group_secret = "the secret of the benchmark's group";
    options.flags = {absl::StrCat("--rank=", r),
                     absl::StrCat("--world_size=", kWorld),
                     r == 0 ? "--rendezvous=127.0.0.1:1"
                            : "--rendezvous=" + ranks.addresses[0]};
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
    for (int layer = 0; layer < kLayers; ++layer) {
      auto parameter = client.CreateParameter(
          ranks.addresses[r], absl::StrCat("layer", layer, ".weight"),
          DType::kFloat32, {kSize, kSize}, init::Normal(0.0, 0.02, layer));
      if (!parameter.ok()) return parameter.status();
      ranks.parameter_ids[r].push_back(parameter->id);
    }
    return absl::OkStatus();
  });
  return created && PushGradients(client, ranks);
}

// Median seconds of kIterations timed calls after kWarmup, all ranks at
// once; `prepare` runs before each, untimed.
inline double TimeSteps(
    const std::function<absl::Status(int)>& step,
    const std::function<bool()>& prepare = [] { return true; }) {
  std::vector<double> seconds;
  for (int it = 0; it < kWarmup + kIterations; ++it) {
    if (!prepare()) return -1;
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
