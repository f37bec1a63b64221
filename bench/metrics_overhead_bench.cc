// What recording metrics costs the step path: DistributedOptimizer.step
// p50 and p99 on daemons that record nothing (--record_metrics=false)
// against daemons that record and serve /metrics while it is scraped every
// 100 ms (ten times Prometheus's usual 1 s, as a worst case), in the same
// run. Rounds alternate between the two so that drift hits both alike;
// the noise is the spread of one configuration's round medians.
//
//   bazel run -c opt //bench:metrics_overhead_bench [-- ROUNDS STEPS]
//
// Workload: two daemons, 10 parameters of 1K floats, Adam: the smallest
// steps, where a per-call cost shows most.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/timing.h"
#include "client/client.h"
#include "client/dist_autograd_context.h"
#include "client/distributed_optimizer.h"
#include "client/local_worker.h"
#include "common/testing/http_get.h"
#include "proto/distopt/v1/status.grpc.pb.h"

namespace distopt {
namespace {

constexpr int kParameters = 10;
constexpr int64_t kElements = 1 << 10;

struct Configuration {
  std::string name;
  std::vector<std::unique_ptr<LocalWorker>> daemons;
  std::vector<std::string> metrics_addresses;
  std::unique_ptr<DistributedOptimizer> optimizer;
  std::vector<std::pair<RemoteParameter, Tensor>> pushes;
  std::vector<double> micros;         // Every step.
  std::vector<double> round_medians;  // One a round.
};

bool Setup(Client& client, Configuration& c, bool record) {
  for (int i = 0; i < 2; ++i) {
    LocalWorkerOptions options;
    if (record) {
      options.flags = {"--metrics_listen=127.0.0.1:0"};
    } else {
      options.flags = {"--record_metrics=false"};
    }
    absl::StatusOr<std::unique_ptr<LocalWorker>> worker =
        LocalWorker::Start(options);
    if (!worker.ok()) {
      std::fprintf(stderr, "%s\n", worker.status().ToString().c_str());
      return false;
    }
    if (record) {
      v1::GetStatusRequest request;
      request.set_without_metrics(true);
      absl::StatusOr<v1::WorkerStatus> status =
          client.GetStatus((*worker)->address(), request);
      if (!status.ok()) return false;
      c.metrics_addresses.push_back(status->metrics_address());
    }
    c.daemons.push_back(*std::move(worker));
  }
  std::vector<RemoteParameter> parameters;
  Tensor gradient = *Tensor::AllocateHost(DType::kFloat32, {kElements});
  std::fill_n(static_cast<float*>(gradient.data()), kElements, 1.0f);
  for (int i = 0; i < kParameters; ++i) {
    absl::StatusOr<RemoteParameter> parameter = client.CreateParameter(
        c.daemons[i % 2]->address(), absl::StrCat("p", i), DType::kFloat32,
        {kElements});
    if (!parameter.ok()) return false;
    parameters.push_back(*parameter);
    c.pushes.emplace_back(*parameter, gradient);
  }
  absl::StatusOr<std::unique_ptr<DistributedOptimizer>> optimizer =
      DistributedOptimizer::Create(&client, "adam", parameters,
                                   {{"lr", hyper::Number(1e-3)}});
  if (!optimizer.ok()) return false;
  c.optimizer = *std::move(optimizer);
  return true;
}

// `steps` timed steps, each in a fresh context with its gradients pushed
// before the timing.
bool Run(Client& client, Configuration& c, int steps) {
  std::vector<double> round;
  for (int i = 0; i < steps; ++i) {
    DistAutogradContext context(&client);
    if (!context.AccumulateGradients(c.pushes).ok()) return false;
    bool ok = true;
    const double seconds =
        bench::SecondsOf([&] { ok = c.optimizer->Step(context.id()).ok(); });
    if (!ok) return false;
    round.push_back(1e6 * seconds);
  }
  c.round_medians.push_back(bench::Median(round));
  c.micros.insert(c.micros.end(), round.begin(), round.end());
  return true;
}

int Main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 8;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 3000;
  Client client;
  Configuration off{"metrics off"}, on{"metrics on, scraped every 100 ms"};
  if (!Setup(client, off, false) || !Setup(client, on, true)) return 1;
  std::atomic<bool> scraping{false}, done{false};
  std::atomic<int64_t> scrapes{0};
  std::thread scraper([&] {
    while (!done) {
      if (scraping) {
        for (const std::string& address : on.metrics_addresses) {
          absl::StatusOr<testing::HttpReply> reply =
              testing::HttpGet(address, "/metrics");
          if (reply.ok() && reply->status == 200) ++scrapes;
        }
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  // Warm-up, then alternate: off-on, on-off, ...
  bool ok = Run(client, off, steps / 4) && Run(client, on, steps / 4);
  off.micros.clear();
  on.micros.clear();
  off.round_medians.clear();
  on.round_medians.clear();
  for (int r = 0; ok && r < rounds; ++r) {
    Configuration* order[2] = {&off, &on};
    if (r % 2 == 1) std::swap(order[0], order[1]);
    for (Configuration* c : order) {
      scraping = c == &on;
      ok = ok && Run(client, *c, steps);
    }
  }
  done = true;
  scraper.join();
  if (!ok) {
    std::fprintf(stderr, "a step failed\n");
    return 1;
  }
  auto spread = [](const std::vector<double>& medians) {
    const auto [low, high] =
        std::minmax_element(medians.begin(), medians.end());
    return (*high - *low) / bench::Median(medians);
  };
  for (const Configuration* c : {&off, &on}) {
    std::printf(
        "%-34s p50 %7.1f us  p99 %7.1f us  round medians spread %.1f%%\n",
        c->name.c_str(), bench::Percentile(c->micros, 0.5),
        bench::Percentile(c->micros, 0.99), 100 * spread(c->round_medians));
  }
  const double ratio =
      bench::Percentile(on.micros, 0.5) / bench::Percentile(off.micros, 0.5);
  const double noise =
      std::max(spread(off.round_medians), spread(on.round_medians));
  std::printf(
      "on/off p50 ratio %.3f; noise (largest spread of round medians) "
      "%.1f%%; %s; %lld scrapes\n",
      ratio, 100 * noise,
      std::abs(ratio - 1) <= noise ? "within noise" : "OUTSIDE noise",
      static_cast<long long>(scrapes.load()));
  return 0;
}

}  // namespace
}  // namespace distopt

int main(int argc, char** argv) { return distopt::Main(argc, argv); }
