// Load and soak (issue 16), through real daemons over real sockets.
//
// SteadyUnderLoad: eight trainers, each a thread with a Client of its own,
// train two-layer linear models whose first layer lives on worker A and
// second on worker B: every step has an autograd context of its own
// (forward on A then B, backward on B then A, DistributedOptimizer step on
// both, release). Each trainer has a model of its own: a daemon refuses a
// backward whose parameters were stepped since its forward (as torch's
// version counters do), which another trainer's step on shared parameters
// would make a race. One context in kLeakEvery is abandoned as a crashed
// trainer would, for the workers' --context_ttl to collect. After a warm-up the
// workers' memory, file descriptors and threads must stay flat, every abandoned
// context must be collected, no step may fail, and step latency must not drift.
//
// IdleConnectionsAndStalledStreamsDoNotStarveSmallCalls: 200 idle
// connections and streams that never read leave a normal client's small
// calls served at about their usual latency.
//
// The number of steps is DISTOPT_SOAK_STEPS (default kDefaultSteps), e.g.
//   bazel test //tests:soak_test --test_env=DISTOPT_SOAK_STEPS=5000
// The figures are printed as tables, so that CI logs show them.
#include <dirent.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/distributed_optimizer.h"
#include "client/local_worker.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/parameter.grpc.pb.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::ListContexts;
using ::distopt::testing::PollUntil;
using ::distopt::testing::StartWorkerOrDie;

// ---------------------------------------------------------------------------
// Figures of a worker process, from /proc.

// Entries of /proc/<pid>/fd: the process's open file descriptors (sockets
// included); -1 if the process is gone.
int64_t OpenFileDescriptors(pid_t pid) {
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (dir == nullptr) return -1;
  int64_t count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

struct ProcessFigures {
  int64_t rss_kb = -1;
  int64_t fds = -1;
  int64_t threads = -1;
};

ProcessFigures FiguresOf(const LocalWorker& worker) {
  return {worker.ProcStatus("VmRSS"), OpenFileDescriptors(worker.pid()),
          worker.ProcStatus("Threads")};
}

// How many autograd contexts `worker` holds, over every page of its list.
int64_t LiveContexts(Client& client, const std::string& worker) {
  int64_t count = 0;
  std::string token;
  do {
    const v1::ListContextsResponse page =
        ListContexts(client, worker, /*page_size=*/1000, token);
    count += page.contexts_size();
    token = page.next_page_token();
  } while (!token.empty());
  return count;
}

// ---------------------------------------------------------------------------
// Latency statistics.

// The q-quantile (0 < q <= 1) of `values`, nearest rank; 0 when empty.
double Quantile(std::vector<float> values, double q) {
  if (values.empty()) return 0;
  const size_t rank =
      static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  const size_t index = std::min(values.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(values.begin(), values.begin() + index, values.end());
  return values[index];
}

// ---------------------------------------------------------------------------
// SteadyUnderLoad.

constexpr int64_t kDefaultSteps = 100000;
constexpr int kTrainerThreads = 8;
// One context in this many is never released.
constexpr int kLeakEvery = 50;
// Short, so that abandoned contexts are collected many times over during
// the run (the daemon's collector looks every min(10 s, ttl / 4)).
constexpr absl::Duration kContextTtl = absl::Seconds(2);
// Latency is reported over this many windows of consecutive steps; the
// first kWarmUpWindows are the warm-up, after which memory, descriptors and
// threads are taken as the baseline.
constexpr int kWindows = 10;
constexpr int kWarmUpWindows = 2;
// How far a worker's figures may grow past their baseline. RSS: the
// issue's 5% of an idle daemon's 28 MB (cuBLAS is no longer loaded on a
// CPU daemon), 1.4 MB: some 200 abandoned contexts never collected.
// Measured window by window: the heap settles in the first 30k steps
// (+1.0 MB, allocator arenas and caches filling) and then grows 20 to
// 30 kB per 10k steps; from the end of the second window to 100k steps
// +2.2% to +2.9%. Descriptors: none are
// opened per step; 4 covers a reconnect or a log file. Threads: gRPC's
// synchronous server keeps a pool that grows with the calls in flight (8
// trainers' calls and step streams, the sampler) and shrinks when idle; 8
// covers its wobble (measured: 22 to 24), a thread per step or per context
// would overrun it within seconds.
constexpr double kRssGrowth = 0.05;
constexpr int64_t kFdSlack = 4;
constexpr int64_t kThreadSlack = 8;
// The last window's median step latency may be this many times the first
// window after warm-up's. Measured on a 2-core machine shared with other
// builds: window medians of 2.3 to 2.8 ms, the largest 1.13 times the
// first (runs of 20k, 100k and 600k steps). Twice leaves room for a CI
// machine's neighbours; a step that slows as a table grows (a linear scan
// of contexts or of remembered steps, say) climbs steadily past it.
constexpr double kLatencyDrift = 2.0;

int64_t SoakSteps() {
  const char* text = std::getenv("DISTOPT_SOAK_STEPS");
  int64_t steps = 0;
  if (text != nullptr && absl::SimpleAtoi(text, &steps) && steps > 0) {
    return steps;
  }
  return kDefaultSteps;
}

// The model: hidden = x A_w^T + A_b on worker A, y = hidden B_w^T + B_b on
// worker B, fitted to a fixed linear teacher with mean squared error.
constexpr int64_t kBatch = 16;
constexpr int64_t kIn = 8;
constexpr int64_t kHidden = 16;
constexpr int64_t kOut = 4;

struct Model {
  std::string worker_a;
  std::string worker_b;
  RemoteParameter hidden_weight;  // [kHidden, kIn] on A.
  RemoteParameter hidden_bias;    // [kHidden] on A.
  RemoteParameter out_weight;     // [kOut, kHidden] on B.
  RemoteParameter out_bias;       // [kOut] on B.

  std::vector<RemoteParameter> parameters() const {
    return {hidden_weight, hidden_bias, out_weight, out_bias};
  }
};

absl::StatusOr<Model> CreateModel(Client& client, const std::string& worker_a,
                                  const std::string& worker_b,
                                  const std::string& prefix) {
  Model model{worker_a, worker_b, {}, {}, {}, {}};
  struct Spec {
    RemoteParameter* into;
    const std::string* worker;
    const char* name;
    Shape shape;
  };
  const Spec specs[] = {
      {&model.hidden_weight, &worker_a, "hidden.weight", {kHidden, kIn}},
      {&model.hidden_bias, &worker_a, "hidden.bias", {kHidden}},
      {&model.out_weight, &worker_b, "out.weight", {kOut, kHidden}},
      {&model.out_bias, &worker_b, "out.bias", {kOut}}};
  uint64_t seed = 1;
  for (const Spec& spec : specs) {
    absl::StatusOr<RemoteParameter> made = client.CreateParameter(
        *spec.worker, prefix + spec.name, DType::kFloat32, spec.shape,
        init::Uniform(-0.3, 0.3, seed++));
    if (!made.ok()) return made.status();
    *spec.into = *std::move(made);
  }
  return model;
}

// A batch of inputs and the teacher's outputs for them.
struct Batch {
  Tensor x;       // [kBatch, kIn]
  Tensor target;  // [kBatch, kOut]
};

Batch RandomBatch(std::mt19937& random) {
  std::uniform_real_distribution<float> uniform(-1, 1);
  Batch batch{*Tensor::AllocateHost(DType::kFloat32, {kBatch, kIn}),
              *Tensor::AllocateHost(DType::kFloat32, {kBatch, kOut})};
  const float* x = batch.x.host_span<float>().data();
  for (float& value : batch.x.host_span<float>()) value = uniform(random);
  float* target = batch.target.host_span<float>().data();
  for (int64_t n = 0; n < kBatch; ++n) {
    for (int64_t o = 0; o < kOut; ++o) {
      float sum = 0;
      for (int64_t i = 0; i < kIn; ++i) {
        sum += 0.5f * std::sin(1.7f * o + 0.9f * i) * x[n * kIn + i];
      }
      target[n * kOut + o] = sum;
    }
  }
  return batch;
}

// Mean squared error of `y` against `target`, and its gradient in `dy`.
double MeanSquaredError(const Tensor& y, const Tensor& target, Tensor& dy) {
  const float* yv = static_cast<const float*>(y.data());
  const float* tv = static_cast<const float*>(target.data());
  float* dv = static_cast<float*>(dy.data());
  const int64_t n = y.num_elements();
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float error = yv[i] - tv[i];
    loss += static_cast<double>(error) * error;
    dv[i] = 2 * error / static_cast<float>(n);
  }
  return loss / static_cast<double>(n);
}

// One training step in an autograd context of its own; returns the loss.
// The context is released on both workers, or with `abandon` forgotten by
// this client only, as a trainer that crashed would leave it. A step that
// fails leaves its context to the TTL too.
absl::StatusOr<double> TrainingStep(Client& client,
                                    DistributedOptimizer& optimizer,
                                    const Model& model, const Batch& batch,
                                    bool abandon) {
  const uint64_t context = client.NewContextId();
  absl::StatusOr<Client::ForwardResult> hidden =
      client.Forward(model.worker_a, context, "linear",
                     {model.hidden_weight.id, model.hidden_bias.id}, {batch.x});
  if (!hidden.ok()) return hidden.status();
  absl::StatusOr<Client::ForwardResult> out = client.Forward(
      model.worker_b, context, "linear",
      {model.out_weight.id, model.out_bias.id}, {hidden->outputs[0]});
  if (!out.ok()) return out.status();
  Tensor dy = *Tensor::AllocateHost(DType::kFloat32, {kBatch, kOut});
  const double loss = MeanSquaredError(out->outputs[0], batch.target, dy);
  absl::StatusOr<std::vector<std::optional<Tensor>>> d_hidden =
      client.Backward(model.worker_b, context, out->forward_id, {dy});
  if (!d_hidden.ok()) return d_hidden.status();
  if (d_hidden->size() != 1 || !(*d_hidden)[0].has_value()) {
    return absl::InternalError("backward on B returned no input gradient");
  }
  absl::StatusOr<std::vector<std::optional<Tensor>>> d_x = client.Backward(
      model.worker_a, context, hidden->forward_id, {*(*d_hidden)[0]});
  if (!d_x.ok()) return d_x.status();
  absl::Status stepped = optimizer.Step(context);
  if (!stepped.ok()) return stepped;
  if (!abandon) {
    for (const std::string* worker : {&model.worker_a, &model.worker_b}) {
      absl::StatusOr<bool> released = client.ReleaseContext(*worker, context);
      if (!released.ok()) return released.status();
      if (!*released) {
        return absl::InternalError(
            absl::StrCat(*worker, " did not hold context ", context));
      }
    }
  }
  client.ForgetContext(context);
  return loss;
}

// Samples the workers' process figures and context counts every `period`
// on a thread of its own, each sample tagged with the steps done by then.
class WorkerSampler {
 public:
  struct Sample {
    int64_t steps_done = 0;
    std::vector<ProcessFigures> figures;  // One per worker.
    std::vector<int64_t> contexts;        // One per worker.
  };

  WorkerSampler(std::vector<const LocalWorker*> workers,
                const std::atomic<int64_t>* steps_done, absl::Duration period)
      : workers_(std::move(workers)), steps_done_(steps_done) {
    thread_ = std::thread([this, period] {
      do {
        TakeSample();
      } while (!stop_.WaitForNotificationWithTimeout(period));
    });
  }
  ~WorkerSampler() { Stop(); }

  // Stops sampling (after one last sample); the samples in time order.
  std::vector<Sample> Stop() {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (thread_.joinable()) thread_.join();
    absl::MutexLock lock(&mutex_);
    return samples_;
  }

 private:
  void TakeSample() {
    Sample sample;
    sample.steps_done = steps_done_->load();
    for (const LocalWorker* worker : workers_) {
      sample.figures.push_back(FiguresOf(*worker));
      sample.contexts.push_back(LiveContexts(client_, worker->address()));
    }
    absl::MutexLock lock(&mutex_);
    samples_.push_back(std::move(sample));
  }

  const std::vector<const LocalWorker*> workers_;
  const std::atomic<int64_t>* const steps_done_;
  Client client_;  // Its own connections: not counted among the trainers'.
  absl::Notification stop_;
  std::thread thread_;
  absl::Mutex mutex_;
  std::vector<Sample> samples_ ABSL_GUARDED_BY(mutex_);
};

// What each step left behind: its latency and loss, by step number.
struct StepRecords {
  explicit StepRecords(int64_t steps) : latency_us(steps), loss(steps) {}
  std::vector<float> latency_us;
  std::vector<float> loss;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::atomic<int64_t> failed{0};
  absl::Mutex mutex;
  std::string first_error ABSL_GUARDED_BY(mutex);
};

// A trainer: its client, its model and the model's optimizer.
struct Trainer {
  std::unique_ptr<Client> client = std::make_unique<Client>();
  Model model;
  std::unique_ptr<DistributedOptimizer> optimizer;
};

absl::StatusOr<Trainer> CreateTrainer(int index, const std::string& worker_a,
                                      const std::string& worker_b) {
  Trainer trainer;
  absl::StatusOr<Model> model = CreateModel(
      *trainer.client, worker_a, worker_b, absl::StrCat("trainer", index, "."));
  if (!model.ok()) return model.status();
  trainer.model = *std::move(model);
  absl::StatusOr<std::unique_ptr<DistributedOptimizer>> optimizer =
      DistributedOptimizer::Create(
          trainer.client.get(), "sgd", trainer.model.parameters(),
          {{"lr", hyper::Number(0.01)}, {"momentum", hyper::Number(0.9)}});
  if (!optimizer.ok()) return optimizer.status();
  trainer.optimizer = *std::move(optimizer);
  return trainer;
}

// A trainer's thread: takes step numbers until `steps` are taken.
void RunTrainer(int index, Trainer& trainer, int64_t steps,
                StepRecords& records) {
  std::mt19937 random(1000 + index);
  for (int64_t step = records.next.fetch_add(1); step < steps;
       step = records.next.fetch_add(1)) {
    const Batch batch = RandomBatch(random);
    const absl::Time start = absl::Now();
    absl::StatusOr<double> loss =
        TrainingStep(*trainer.client, *trainer.optimizer, trainer.model, batch,
                     /*abandon=*/step % kLeakEvery == kLeakEvery - 1);
    records.latency_us[step] =
        static_cast<float>(absl::ToDoubleMicroseconds(absl::Now() - start));
    records.loss[step] = loss.ok() ? static_cast<float>(*loss) : NAN;
    if (!loss.ok() && records.failed.fetch_add(1) == 0) {
      absl::MutexLock lock(&records.mutex);
      records.first_error =
          absl::StrCat("step ", step, ": ", loss.status().ToString());
    }
    records.done.fetch_add(1);
  }
}

struct WindowFigures {
  double p50_us = 0;
  double p99_us = 0;
  double mean_loss = 0;
  // The workers' RSS in the last sample taken within the window (-1: none).
  int64_t rss_kb[2] = {-1, -1};
};

std::vector<WindowFigures> FiguresPerWindow(
    const StepRecords& records, int64_t steps,
    const std::vector<WorkerSampler::Sample>& samples) {
  std::vector<WindowFigures> windows;
  for (int w = 0; w < kWindows; ++w) {
    const int64_t begin = steps * w / kWindows;
    const int64_t end = steps * (w + 1) / kWindows;
    std::vector<float> latencies(records.latency_us.begin() + begin,
                                 records.latency_us.begin() + end);
    double loss = 0;
    for (int64_t s = begin; s < end; ++s) loss += records.loss[s];
    WindowFigures window{
        Quantile(latencies, 0.5), Quantile(latencies, 0.99),
        end > begin ? loss / static_cast<double>(end - begin) : 0};
    for (const WorkerSampler::Sample& sample : samples) {
      if (sample.steps_done < begin || sample.steps_done > end) continue;
      for (int worker = 0; worker < 2; ++worker) {
        window.rss_kb[worker] = sample.figures[worker].rss_kb;
      }
    }
    windows.push_back(window);
  }
  return windows;
}

// The first sample taken once `warm_up_steps` were done (the baseline),
// and, per worker, the largest figures from then on.
struct ResourceSummary {
  WorkerSampler::Sample baseline;
  std::vector<ProcessFigures> peak;
  std::vector<ProcessFigures> last;
  std::vector<int64_t> peak_contexts;
};

ResourceSummary Summarize(const std::vector<WorkerSampler::Sample>& samples,
                          int64_t warm_up_steps, size_t workers) {
  ResourceSummary summary;
  summary.peak.resize(workers);
  summary.peak_contexts.resize(workers);
  bool warm = false;
  for (const WorkerSampler::Sample& sample : samples) {
    for (size_t w = 0; w < workers; ++w) {
      summary.peak_contexts[w] =
          std::max(summary.peak_contexts[w], sample.contexts[w]);
    }
    if (!warm && sample.steps_done < warm_up_steps) continue;
    if (!warm) summary.baseline = sample;
    warm = true;
    for (size_t w = 0; w < workers; ++w) {
      ProcessFigures& peak = summary.peak[w];
      const ProcessFigures& now = sample.figures[w];
      peak.rss_kb = std::max(peak.rss_kb, now.rss_kb);
      peak.fds = std::max(peak.fds, now.fds);
      peak.threads = std::max(peak.threads, now.threads);
    }
    summary.last = sample.figures;
  }
  return summary;
}

TEST(SoakTest, SteadyUnderLoad) {
  const int64_t steps = SoakSteps();
  const int64_t warm_up_steps = steps * kWarmUpWindows / kWindows;
  const std::vector<std::string> flags = {"--context_ttl=" +
                                          absl::FormatDuration(kContextTtl)};
  std::unique_ptr<LocalWorker> a = StartWorkerOrDie(flags);
  std::unique_ptr<LocalWorker> b = StartWorkerOrDie(flags);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  // Declared after the workers so that the clients go first and the
  // workers then stop at once.
  std::vector<Trainer> trainers;
  for (int t = 0; t < kTrainerThreads; ++t) {
    absl::StatusOr<Trainer> trainer =
        CreateTrainer(t, a->address(), b->address());
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    ASSERT_EQ(trainer->optimizer->owners().size(), 2u);
    trainers.push_back(*std::move(trainer));
  }
  Client& client = *trainers[0].client;

  StepRecords records(steps);
  const absl::Time start = absl::Now();
  {
    WorkerSampler sampler({a.get(), b.get()}, &records.done,
                          absl::Milliseconds(250));
    std::vector<std::thread> threads;
    for (int t = 0; t < kTrainerThreads; ++t) {
      threads.emplace_back(RunTrainer, t, std::ref(trainers[t]), steps,
                           std::ref(records));
    }
    for (std::thread& thread : threads) thread.join();
    const absl::Duration elapsed = absl::Now() - start;
    const std::vector<WorkerSampler::Sample> samples = sampler.Stop();

    // --- The figures, for CI logs.
    std::printf("\n%lld steps, %d trainer threads, %.1f s: %.0f steps/s\n",
                static_cast<long long>(steps), kTrainerThreads,
                absl::ToDoubleSeconds(elapsed),
                static_cast<double>(steps) / absl::ToDoubleSeconds(elapsed));
    const std::vector<WindowFigures> windows =
        FiguresPerWindow(records, steps, samples);
    std::printf(
        "window  steps              p50 ms   p99 ms  RSS kB: A      B   "
        "mean loss\n");
    for (int w = 0; w < kWindows; ++w) {
      std::printf("%6d  %8lld-%-8lld %7.3f  %7.3f  %9lld %6lld   %.3g%s\n", w,
                  static_cast<long long>(steps * w / kWindows),
                  static_cast<long long>(steps * (w + 1) / kWindows - 1),
                  windows[w].p50_us / 1000, windows[w].p99_us / 1000,
                  static_cast<long long>(windows[w].rss_kb[0]),
                  static_cast<long long>(windows[w].rss_kb[1]),
                  windows[w].mean_loss,
                  w < kWarmUpWindows ? "  (warm-up)" : "");
    }
    const ResourceSummary summary = Summarize(samples, warm_up_steps, 2);
    ASSERT_FALSE(summary.last.empty()) << "no sample after the warm-up";
    std::printf(
        "worker  RSS kB: warm  peak   end      fds: warm peak end   "
        "threads: warm peak end   contexts peak\n");
    for (int w = 0; w < 2; ++w) {
      const ProcessFigures& warm = summary.baseline.figures[w];
      const ProcessFigures& peak = summary.peak[w];
      const ProcessFigures& last = summary.last[w];
      std::printf(
          "%6s  %6lld %6lld %6lld      %4lld %4lld %4lld   %4lld %4lld %4lld "
          "          %lld\n",
          w == 0 ? "A" : "B", static_cast<long long>(warm.rss_kb),
          static_cast<long long>(peak.rss_kb),
          static_cast<long long>(last.rss_kb), static_cast<long long>(warm.fds),
          static_cast<long long>(peak.fds), static_cast<long long>(last.fds),
          static_cast<long long>(warm.threads),
          static_cast<long long>(peak.threads),
          static_cast<long long>(last.threads),
          static_cast<long long>(summary.peak_contexts[w]));
    }
    std::fflush(stdout);

    // --- No step failed, and the model learned (the steps were applied).
    {
      absl::MutexLock lock(&records.mutex);
      EXPECT_EQ(records.failed.load(), 0) << "first: " << records.first_error;
    }
    EXPECT_LT(windows.back().mean_loss, windows.front().mean_loss);

    // --- Flat after the warm-up.
    for (int w = 0; w < 2; ++w) {
      const ProcessFigures& warm = summary.baseline.figures[w];
      const ProcessFigures& peak = summary.peak[w];
      const char* name = w == 0 ? "worker A" : "worker B";
      EXPECT_LE(peak.rss_kb, warm.rss_kb * (1 + kRssGrowth))
          << name << "'s RSS grew from " << warm.rss_kb << " kB";
      EXPECT_LE(peak.fds, warm.fds + kFdSlack)
          << name << "'s open descriptors grew from " << warm.fds;
      EXPECT_LE(peak.threads, warm.threads + kThreadSlack)
          << name << "'s threads grew from " << warm.threads;
    }
    EXPECT_LE(windows.back().p50_us,
              kLatencyDrift * windows[kWarmUpWindows].p50_us)
        << "step latency drifted";

    // --- The collector keeps up: the contexts alive at once are about the
    // abandoned ones of one TTL and one collector period (measured: 165 at
    // 3100 steps/s, 62 abandoned a second), plus those in flight. Twice
    // that and 2 s more for a busy machine; a collector that does not run
    // during the load overruns it from about 25k steps on.
    const double abandoned_per_second = static_cast<double>(steps) /
                                        kLeakEvery /
                                        absl::ToDoubleSeconds(elapsed);
    const double most_contexts =
        kTrainerThreads +
        abandoned_per_second *
            absl::ToDoubleSeconds(2 * (kContextTtl + kContextTtl / 4) +
                                  absl::Seconds(2));
    for (int w = 0; w < 2; ++w) {
      EXPECT_LE(summary.peak_contexts[w], most_contexts)
          << (w == 0 ? "worker A" : "worker B");
    }
  }

  // --- Every abandoned context is collected: idle for the TTL, then found
  // by the collector within a quarter of it; 5 s more for a busy machine.
  const absl::Time finished = absl::Now();
  const bool collected = PollUntil(
      [&] {
        return LiveContexts(client, a->address()) == 0 &&
               LiveContexts(client, b->address()) == 0;
      },
      kContextTtl + kContextTtl / 4 + absl::Seconds(5));
  EXPECT_TRUE(collected) << LiveContexts(client, a->address())
                         << " contexts left on A, "
                         << LiveContexts(client, b->address()) << " on B";
  if (collected) {
    std::printf("abandoned contexts all collected %.1f s after the last step\n",
                absl::ToDoubleSeconds(absl::Now() - finished));
  }

  // --- The parameters are finite.
  for (const Trainer& trainer : trainers) {
    for (const RemoteParameter& parameter : trainer.model.parameters()) {
      absl::StatusOr<Tensor> values = client.ReadParameter(parameter);
      ASSERT_TRUE(values.ok()) << values.status();
      for (float value : values->host_span<float>()) {
        ASSERT_TRUE(std::isfinite(value)) << parameter.id;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// IdleConnectionsAndStalledStreamsDoNotStarveSmallCalls.

constexpr int kIdleConnections = 200;
// Connections of readers that never read, each holding its
// --max_streams_per_connection (the default, 16) ReadParameter streams.
constexpr int kStalledConnections = 4;
constexpr int kStreamsPerConnection = 16;
constexpr int kSettlingProbes = 100;
constexpr int kLatencyProbes = 300;

// A channel of its own connection (not gRPC's process-wide pool).
std::shared_ptr<grpc::Channel> OwnConnection(const std::string& address) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   arguments);
}

// A connection whose client takes in no more of a reply than the
// application reads, plus HTTP/2's first 64 KiB window. With gRPC's
// defaults (BDP probing) the transport grows a stream's window and takes
// in megabytes that the application never asked for: a reader that never
// reads would then receive a whole 16 MiB parameter, and its call end.
std::shared_ptr<grpc::Channel> StalledConnection(const std::string& address) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  arguments.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  arguments.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 10);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   arguments);
}

// One cheap call over `channel`, which connects it.
grpc::Status ListParametersOver(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = v1::ParameterService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::ListParametersRequest request;
  v1::ListParametersResponse response;
  return stub->ListParameters(&context, request, &response);
}

// A ReadParameter of `parameter` over `channel`, read to its end.
grpc::Status ReadOver(const std::shared_ptr<grpc::Channel>& channel,
                      const RemoteParameter& parameter) {
  auto stub = v1::ParameterService::NewStub(channel);
  grpc::ClientContext context;
  v1::ReadParameterRequest request;
  request.mutable_parameter()->set_id(parameter.id);
  auto reader = stub->ReadParameter(&context, request);
  v1::ParameterChunk chunk;
  while (reader->Read(&chunk)) {
  }
  return reader->Finish();
}

// What a normal client sees in one situation of the daemon's.
struct PhaseFigures {
  std::string name;
  // The probes right after the situation was set up, while the daemon may
  // still be busy with it, and those after them.
  double settling_p99_us = 0;
  double p50_us = 0;
  double p99_us = 0;
  ProcessFigures daemon;
};

// Latencies of `probes` GetParameter calls of `small` by `client`.
std::vector<float> SmallCallLatencies(Client& client,
                                      const RemoteParameter& small,
                                      int probes) {
  std::vector<float> latencies;
  for (int i = 0; i < probes; ++i) {
    const absl::Time start = absl::Now();
    EXPECT_TRUE(client.GetParameter(small).ok());
    latencies.push_back(
        static_cast<float>(absl::ToDoubleMicroseconds(absl::Now() - start)));
  }
  return latencies;
}

PhaseFigures MeasurePhase(const std::string& name, Client& client,
                          const RemoteParameter& small,
                          const LocalWorker& worker) {
  PhaseFigures phase;
  phase.name = name;
  phase.settling_p99_us =
      Quantile(SmallCallLatencies(client, small, kSettlingProbes), 0.99);
  const std::vector<float> latencies =
      SmallCallLatencies(client, small, kLatencyProbes);
  phase.p50_us = Quantile(latencies, 0.5);
  phase.p99_us = Quantile(latencies, 0.99);
  phase.daemon = FiguresOf(worker);
  return phase;
}

void PrintPhases(const std::vector<PhaseFigures>& phases) {
  std::printf(
      "\nGetParameter latency    settling p99 ms   p50 ms   p99 ms   "
      "daemon fds threads RSS kB\n");
  for (const PhaseFigures& phase : phases) {
    std::printf("%-24s %14.3f  %7.3f  %7.3f   %10lld %7lld %6lld\n",
                phase.name.c_str(), phase.settling_p99_us / 1000,
                phase.p50_us / 1000, phase.p99_us / 1000,
                static_cast<long long>(phase.daemon.fds),
                static_cast<long long>(phase.daemon.threads),
                static_cast<long long>(phase.daemon.rss_kb));
  }
  std::fflush(stdout);
}

// Streams that never read their reply: their contexts and readers.
struct StalledReads {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::ParameterChunk>>> readers;

  ~StalledReads() {
    for (auto& context : contexts) context->TryCancel();
    for (auto& reader : readers) reader->Finish().IgnoreError();
  }
};

TEST(SoakTest, IdleConnectionsAndStalledStreamsDoNotStarveSmallCalls) {
  // The stalled streams must stay stalled while latency is measured.
  std::unique_ptr<LocalWorker> worker =
      StartWorkerOrDie({"--stream_stall_timeout=300s"});
  ASSERT_NE(worker, nullptr);
  const std::string address = worker->address();
  auto client = std::make_unique<Client>();
  absl::StatusOr<RemoteParameter> small =
      client->CreateParameter(address, "small", DType::kFloat32, {4});
  ASSERT_TRUE(small.ok()) << small.status();
  absl::StatusOr<RemoteParameter> big = client->CreateParameter(
      address, "big", DType::kFloat32, {4 << 20}, init::Constant(1));
  ASSERT_TRUE(big.ok()) << big.status();

  std::vector<PhaseFigures> phases;
  phases.push_back(MeasurePhase("alone", *client, *small, *worker));

  std::vector<std::shared_ptr<grpc::Channel>> idle;
  for (int i = 0; i < kIdleConnections; ++i) {
    idle.push_back(OwnConnection(address));
    const grpc::Status status = ListParametersOver(idle.back());
    ASSERT_TRUE(status.ok())
        << "idle connection " << i << ": " << status.error_message();
  }
  phases.push_back(MeasurePhase(absl::StrCat(kIdleConnections, " idle"),
                                *client, *small, *worker));
  // The premise: the daemon really holds a socket per idle connection.
  EXPECT_GE(phases[1].daemon.fds, phases[0].daemon.fds + kIdleConnections);

  auto stalled = std::make_unique<StalledReads>();
  for (int c = 0; c < kStalledConnections; ++c) {
    stalled->channels.push_back(StalledConnection(address));
    auto stub = v1::ParameterService::NewStub(stalled->channels.back());
    for (int s = 0; s < kStreamsPerConnection; ++s) {
      stalled->contexts.push_back(std::make_unique<grpc::ClientContext>());
      v1::ReadParameterRequest request;
      request.mutable_parameter()->set_id(big->id);
      stalled->readers.push_back(
          stub->ReadParameter(stalled->contexts.back().get(), request));
    }
    // The connection's streams have arrived and hold all its slots when
    // one more read on it is refused.
    // (A generous wait: a loaded CI machine took over 10 s once.)
    ASSERT_TRUE(PollUntil(
        [&] {
          return ReadOver(stalled->channels.back(), *small).error_code() ==
                 grpc::StatusCode::RESOURCE_EXHAUSTED;
        },
        absl::Seconds(60)))
        << "stalled connection " << c << "'s readers never held its slots";
  }
  phases.push_back(MeasurePhase(
      absl::StrCat("+ ", kStalledConnections * kStreamsPerConnection,
                   " stalled streams"),
      *client, *small, *worker));
  PrintPhases(phases);
  // The stalled streams were still there while latency was measured: they
  // still hold their connections' slots.
  for (size_t c = 0; c < stalled->channels.size(); ++c) {
    EXPECT_EQ(ReadOver(stalled->channels[c], *small).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED)
        << "stalled connection " << c << " no longer holds its slots";
  }

  // Measured on a 2-core machine: p50 0.04 ms alone, 0.06 ms with the
  // idle connections, 0.07 to 0.09 ms with the stalled streams too; p99
  // about 0.1 ms in all three, and at most 0.7 ms in the probes right
  // after the stalled streams opened (the daemon holds +150 MB and a
  // thread each for them). The bounds: 3x, or 5 ms for p50 and 50 ms for p99,
  // whichever is larger: 50x to 500x what was measured, as a loaded CI
  // machine has neighbours. A daemon whose small calls wait behind the
  // stalled streams or the idle connections (a thread per connection, a
  // shared queue, a lock held while a reply is written) would have them
  // wait for seconds, or until their deadline.
  const PhaseFigures& alone = phases[0];
  const double p50_bound_us = std::max(3 * alone.p50_us, 5000.0);
  const double p99_bound_us = std::max(3 * alone.p99_us, 50000.0);
  for (size_t i = 1; i < phases.size(); ++i) {
    EXPECT_LT(phases[i].p50_us, p50_bound_us) << phases[i].name;
    EXPECT_LT(phases[i].p99_us, p99_bound_us) << phases[i].name;
    EXPECT_LT(phases[i].settling_p99_us, p99_bound_us) << phases[i].name;
  }

  // When they go, the daemon closes their sockets.
  stalled.reset();
  idle.clear();
  EXPECT_TRUE(PollUntil([&] {
    return OpenFileDescriptors(worker->pid()) <= alone.daemon.fds + kFdSlack;
  })) << OpenFileDescriptors(worker->pid())
      << " descriptors open; before: " << alone.daemon.fds;
  client.reset();
}

}  // namespace
}  // namespace distopt
