// DistributedOptimizer.step latency, p50 and p99, for 1, 2 and 4 workers
// with (a) 10 parameters of 1K floats and (b) 4 parameters of 1M floats,
// SGD and Adam, against PyTorch's RPC DistributedOptimizer (TensorPipe on
// loopback) doing the same in the same run (goal: p50 at least 5x lower).
//
//   bazel run -c opt //bench:distributed_step_bench
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
#include "absl/time/clock.h"
#include "bench/timing.h"
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
  int iterations;
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
          {worker, client
                       ->CreateOptimizer(worker, kind,
                                         {{"lr", hyper::Number(1e-3)}}, ids)
                       ->id()});
    }
    pool_ = std::make_unique<ThreadPool>(static_cast<int>(owners_.size()));
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
  };

  bool UnaryStep(const Owner& owner, uint64_t context_id) {
    grpc::ClientContext context;
    client_->SetDeadline(context, 0);
    v1::StepRequest request;
    request.set_optimizer_id(owner.optimizer_id);
    request.set_context_id(context_id);
    v1::StepResponse response;
    return v1::OptimizerService::NewStub(client_->Channel(owner.worker))
        ->Step(&context, request, &response)
        .ok();
  }

  Client* const client_;
  std::vector<Owner> owners_;
  std::unique_ptr<ThreadPool> pool_;
};

void Run(int workers) {
  std::vector<std::unique_ptr<LocalWorker>> daemons;
  for (int i = 0; i < workers; ++i) {
    absl::StatusOr<std::unique_ptr<LocalWorker>> worker =
        LocalWorker::Start({});
    if (!worker.ok()) {
      std::printf("cannot start a worker: %s\n",
                  worker.status().ToString().c_str());
      return;
    }
    daemons.push_back(*std::move(worker));
  }
  const auto torch = TorchLatencies(workers);
  Client client;
  int created = 0;
  for (const Layout& layout : kLayouts) {
    for (const char* kind : kKinds) {
      std::vector<RemoteParameter> parameters;
      for (int i = 0; i < layout.count; ++i) {
        parameters.push_back(*client.CreateParameter(
            daemons[i % workers]->address(), absl::StrCat("p", created++),
            DType::kFloat32, {layout.elements}));
      }
      auto optimizer = *DistributedOptimizer::Create(
          &client, kind, parameters, {{"lr", hyper::Number(1e-3)}});
      UnaryFanOut unary(&client, kind, parameters);
      Tensor gradient =
          *Tensor::AllocateHost(DType::kFloat32, {layout.elements});
      std::fill_n(static_cast<float*>(gradient.data()), layout.elements, 1.0f);
      std::vector<std::pair<RemoteParameter, Tensor>> pushes;
      for (const RemoteParameter& p : parameters)
        pushes.emplace_back(p, gradient);
      std::vector<double> micros;
      std::vector<double> unary_micros;
      for (int it = 0; it < layout.iterations; ++it) {
        DistAutogradContext context(&client);
        if (!context.AccumulateGradients(pushes).ok()) return;
        bool stepped = false;
        micros.push_back(1e6 * bench::SecondsOf([&] {
                           stepped = optimizer->Step(context.id()).ok();
                         }));
        if (!stepped) return;
        // The unary optimizers step the same context's gradients.
        unary_micros.push_back(1e6 * bench::SecondsOf([&] {
                                 stepped = unary.Step(context.id());
                               }));
        if (!stepped) return;
      }
      const double p50 = bench::Percentile(micros, 0.5);
      const double p99 = bench::Percentile(micros, 0.99);
      std::printf(
          "%d worker(s) %-5s %-4s  distopt p50 %6.0f us  p99 %6.0f us  "
          "(unary Step p50 %6.0f us)",
          workers, layout.name.c_str(), kind, p50, p99,
          bench::Percentile(unary_micros, 0.5));
      auto it = torch.find(absl::StrCat(workers, " ", layout.name, " ", kind));
      if (it != torch.end()) {
        std::printf(
            "  torch p50 %6.0f us  p99 %6.0f us  p50 ratio %.1fx (goal >= 5)\n",
            it->second.first, it->second.second, it->second.first / p50);
      } else {
        std::printf("  torch: not available\n");
      }
    }
  }
}

}  // namespace
}  // namespace distopt

int main() {
  for (int workers : {1, 2, 4}) distopt::Run(workers);
  return 0;
}
