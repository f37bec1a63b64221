// DistributedOptimizer.step latency, p50 and p99, for 1, 2 and 4 workers
// with (a) 10 parameters of 1K floats and (b) 4 parameters of 1M floats,
// SGD and Adam, against PyTorch's RPC DistributedOptimizer (TensorPipe on
// loopback) doing the same in the same run (goal: p50 at least 5x lower).
//
//   bazel run -c opt //bench:distributed_step_bench
//   bazel run -c opt //bench:distributed_step_bench -- \
//       --benchmark_filter='BM_DistributedStep/1/' --benchmark_out=step.json
//
// Arguments of BM_DistributedStep: workers, layout (0: small, 1: large),
// kind (0: sgd, 1: adam). The counters carry p50/p99 of our step, the
// unary fan-out's p50 and the PyTorch peer's p50/p99 and ratio; a summary
// line per case follows the table.
//
// The gradients are put in each context before the timing; only the step
// (all owners in parallel) is timed, as in the PyTorch peer. For reference
// the same steps also go through the unary Step RPC, one thread per owner
// (the transport DistributedOptimizer used before StepStream), on
// optimizers of their own over the same parameters.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/summary_reporter.h"
#include "bench/timing.h"
#include "benchmark/benchmark.h"
#include "client/client.h"
#include "client/dist_autograd_context.h"
#include "client/distributed_optimizer.h"
#include "client/local_worker.h"
#include "common/thread_pool.h"
#include "grpcpp/client_context.h"

namespace distopt {
namespace {

struct Layout {
  std::string name;
  int count;
  int64_t elements;
  int iterations;  // For the PyTorch peer; ours runs until the timing settles.
};

const Layout kLayouts[] = {{"small", 10, 1 << 10, 300},
                           {"large", 4, 1 << 20, 30}};
const char* const kKinds[] = {"sgd", "adam"};

// "workers layout kind" -> {p50_us, p99_us} from the PyTorch peer.
std::map<std::string, std::pair<double, double>> TorchLatencies(int workers) {
  const char* python = std::getenv("DISTOPT_TORCH_PYTHON");
  const std::string command = absl::StrCat(
      python != nullptr ? python : "/usr/bin/python3",
      " tools/bench/torch_rpc_step.py ", workers, " ", kLayouts[0].iterations,
      " ", kLayouts[1].iterations, " 2>/dev/null");
  std::map<std::string, std::pair<double, double>> result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char layout[32], kind[32];
  int w = 0;
  double p50 = 0, p99 = 0;
  while (std::fscanf(pipe, "%d %31s %31s %lf %lf", &w, layout, kind, &p50,
                     &p99) == 5) {
    result[absl::StrCat(w, " ", layout, " ", kind)] = {p50, p99};
  }
  pclose(pipe);
  return result;
}

// The same optimizer as DistributedOptimizer's, one per owner, stepped with
// unary Step calls sent in parallel from a thread per owner.
class UnaryFanOut {
 public:
  UnaryFanOut(Client* client, const char* kind,
              const std::vector<RemoteParameter>& parameters)
      : client_(client) {
    std::map<std::string, std::vector<uint64_t>> by_worker;
    for (const RemoteParameter& p : parameters) {
      by_worker[p.worker].push_back(p.id);
    }
    for (const auto& [worker, ids] : by_worker) {
      owners_.push_back(
          {worker,
           client
               ->CreateOptimizer(worker, kind, {{"lr", hyper::Number(1e-3)}},
                                 ids)
               ->id(),
           v1::OptimizerService::NewStub(client->Channel(worker))});
    }
    pool_ = std::make_unique<ThreadPool>(static_cast<int>(owners_.size()));
  }
  ~UnaryFanOut() {
    for (const Owner& owner : owners_) {
      client_->DeleteOptimizer(owner.worker, owner.optimizer_id).IgnoreError();
    }
  }

  bool Step(uint64_t context_id) {
    std::vector<char> ok(owners_.size(), 0);
    pool_->ParallelFor(static_cast<int64_t>(owners_.size()), 1,
                       [&](int64_t begin, int64_t end) {
                         for (int64_t i = begin; i < end; ++i) {
                           ok[i] = UnaryStep(owners_[i], context_id);
                         }
                       });
    return std::count(ok.begin(), ok.end(), 1) ==
           static_cast<std::ptrdiff_t>(ok.size());
  }

 private:
  struct Owner {
    std::string worker;
    uint64_t optimizer_id;
    // Made once, outside the timing.
    std::unique_ptr<v1::OptimizerService::Stub> stub;
  };

  bool UnaryStep(const Owner& owner, uint64_t context_id) {
    grpc::ClientContext context;
    client_->SetDeadline(context, 0);
    v1::StepRequest request;
    request.set_optimizer_id(owner.optimizer_id);
    request.set_context_id(context_id);
    v1::StepResponse response;
    return owner.stub->Step(&context, request, &response).ok();
  }

  Client* const client_;
  std::vector<Owner> owners_;
  std::unique_ptr<ThreadPool> pool_;
};

// The daemons of the worker count being measured: started when a benchmark
// asks for a new count (they run grouped by count), with the PyTorch peer's
// latencies for that count.
struct Workers {
  int count = 0;
  std::vector<std::unique_ptr<LocalWorker>> daemons;
  std::map<std::string, std::pair<double, double>> torch;
};

Workers& Current() {
  static Workers* current = new Workers;
  return *current;
}

// Stops the daemons still running (at the end of the run).
void StopWorkers() {
  Current().daemons.clear();
  Current().count = 0;
}

absl::StatusOr<Workers*> WorkersFor(int count) {
  Workers* current = &Current();
  if (current->count == count) return current;
  current->daemons.clear();
  current->count = 0;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<std::unique_ptr<LocalWorker>> worker =
        LocalWorker::Start({});
    if (!worker.ok()) return worker.status();
    current->daemons.push_back(*std::move(worker));
  }
  current->torch = TorchLatencies(count);
  current->count = count;
  return current;
}

// One (workers, layout, kind): every iteration steps a fresh context once
// through DistributedOptimizer (the timed step) and once through the unary
// fan-out. The manual time is the streamed step's.
void BM_DistributedStep(benchmark::State& state) {
  const int workers = static_cast<int>(state.range(0));
  const Layout& layout = kLayouts[state.range(1)];
  const char* kind = kKinds[state.range(2)];
  absl::StatusOr<Workers*> running = WorkersFor(workers);
  if (!running.ok()) {
    state.SkipWithError(std::string(running.status().message()).c_str());
    return;
  }
  static int created = 0;
  Client client;
  std::vector<RemoteParameter> parameters;
  for (int i = 0; i < layout.count; ++i) {
    absl::StatusOr<RemoteParameter> parameter = client.CreateParameter(
        (*running)->daemons[i % workers]->address(),
        absl::StrCat("p", created++), DType::kFloat32, {layout.elements});
    if (!parameter.ok()) {
      state.SkipWithError(std::string(parameter.status().message()).c_str());
      return;
    }
    parameters.push_back(*parameter);
  }
  auto optimizer = *DistributedOptimizer::Create(&client, kind, parameters,
                                                 {{"lr", hyper::Number(1e-3)}});
  auto unary_optimizers =
      std::make_unique<UnaryFanOut>(&client, kind, parameters);
  UnaryFanOut& unary = *unary_optimizers;
  Tensor gradient = *Tensor::AllocateHost(DType::kFloat32, {layout.elements});
  std::fill_n(static_cast<float*>(gradient.data()), layout.elements, 1.0f);
  std::vector<std::pair<RemoteParameter, Tensor>> pushes;
  for (const RemoteParameter& p : parameters) pushes.emplace_back(p, gradient);

  std::vector<double> micros;
  std::vector<double> unary_micros;
  for (auto _ : state) {
    DistAutogradContext context(&client);
    bool ok = context.AccumulateGradients(pushes).ok();
    const double seconds = bench::SecondsOf(
        [&] { ok = ok && optimizer->Step(context.id()).ok(); });
    // The unary optimizers step the same context's gradients.
    unary_micros.push_back(
        1e6 * bench::SecondsOf([&] { ok = ok && unary.Step(context.id()); }));
    if (!ok) {
      state.SkipWithError("a step failed");
      return;
    }
    micros.push_back(1e6 * seconds);
    state.SetIterationTime(seconds);
  }
  // The daemons serve the next cases: leave nothing behind.
  optimizer.reset();
  unary_optimizers.reset();
  for (const RemoteParameter& p : parameters) {
    client.DeleteParameter(p).IgnoreError();
  }
  const double p50 = bench::Percentile(micros, 0.5);
  state.counters["p50_us"] = p50;
  state.counters["p99_us"] = bench::Percentile(micros, 0.99);
  state.counters["unary_p50_us"] = bench::Percentile(unary_micros, 0.5);
  auto torch = (*running)->torch.find(
      absl::StrCat(workers, " ", layout.name, " ", kind));
  if (torch != (*running)->torch.end()) {
    state.counters["torch_p50_us"] = torch->second.first;
    state.counters["torch_p99_us"] = torch->second.second;
    state.counters["torch_ratio"] = torch->second.first / p50;
  }
  state.SetLabel(absl::StrCat(workers, " worker(s) ", layout.name, " ", kind));
}

void Arguments(benchmark::internal::Benchmark* b) {
  for (int workers : {1, 2, 4}) {
    for (int layout = 0; layout < 2; ++layout) {
      for (int kind = 0; kind < 2; ++kind) b->Args({workers, layout, kind});
    }
  }
}
BENCHMARK(BM_DistributedStep)
    ->Apply(Arguments)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// A line per case: our step against the goal and the PyTorch peer.
void Summary(const std::vector<bench::BenchmarkRun>& runs) {
  for (const bench::BenchmarkRun& run : runs) {
    auto value = [&](const char* name) { return bench::Counter(run, name); };
    std::string line = absl::StrFormat(
        "%-22s distopt p50 %6.0f us  p99 %6.0f us  (unary Step p50 %6.0f us)",
        run.report_label, value("p50_us"), value("p99_us"),
        value("unary_p50_us"));
    if (value("torch_p50_us") < 0) {
      line += "  torch: not available";
    } else {
      line += absl::StrFormat(
          "  torch p50 %6.0f us  p99 %6.0f us  p50 ratio %.1fx (goal >= 5)",
          value("torch_p50_us"), value("torch_p99_us"), value("torch_ratio"));
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace
}  // namespace distopt

int main(int argc, char** argv) {
  const int status =
      distopt::bench::RunBenchmarks(argc, argv, distopt::Summary);
  distopt::StopWorkers();
  return status;
}
