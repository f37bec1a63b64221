// Checkpoints of the seed tutorial's model (20 linear weights of 2000 x
// 2000, Adam: 305 MiB of parameters and 610 MiB of state) on one daemon,
// against the disk they are written to, measured in the same run on the
// same folder:
//
//   - write throughput: the bytes of one CheckpointService.Save over its
//     write time, against fsync'd sequential writes of as many bytes in the
//     same blocks (goal >= 0.7);
//   - step-time overhead of --checkpoint_every_steps=10: steps back to back
//     (gradients pushed into ten contexts first, then the ten steps, as a
//     trainer whose forward and backward are fast would), on that daemon
//     against one without checkpoints, batches alternating between the two
//     (goal <= 5 %); and whole training iterations as a trainer runs them
//     (each pushes its gradients, then steps) on one daemon, batches of
//     ten with a save alternating with batches without;
//   - restore: the time from starting a daemon on the checkpoint to its
//     serving, less an empty daemon's start, against reading the
//     checkpoint's files (goal >= 0.7), the median of five pairs. All
//     three start with a cold page cache when this process may drop it
//     (root), and it says so when not.
//
//   bazel run -c opt //bench:checkpoint_bench [-- [--keep] FOLDER]
//   bazel run -c opt //bench:checkpoint_bench -- --restore_only [FOLDER]
//   bazel run -c opt //bench:checkpoint_bench -- --save_only [--biases]
//       [FOLDER]
//
// FOLDER (default /var/tmp/distopt_checkpoint_bench) must be on the disk
// to measure, not a tmpfs; it is emptied first and removed at the end,
// unless --keep: then --restore_only measures the restore alone again on
// what it left (to profile or compare a change to the restore).
// --save_only only leaves such a checkpoint (after one step), in a minute;
// with --biases, of the model with a bias after each weight, whose values
// do not lie on the disk's blocks in the files.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/timing.h"
#include "client/client.h"
#include "client/hyperparameters.h"
#include "client/local_worker.h"

namespace distopt {
namespace {

namespace fs = std::filesystem;
using bench::SecondsOf;

constexpr int kLayers = 20;
constexpr int64_t kSize = 2000;
constexpr int kBatches = 4;
constexpr int kEverySteps = 10;
constexpr int kIterationBatches = 6;
constexpr size_t kBlockBytes = size_t{64} << 20;  // As the daemon writes.

bool DropPageCache() {
  sync();
  std::ofstream drop("/proc/sys/vm/drop_caches");
  drop << "3\n";
  return static_cast<bool>(drop.flush());
}

// Seconds to write `bytes` to a new file in `dir` in kBlockBytes blocks
// around the page cache (O_DIRECT), then fsync it: the disk's sequential
// write bandwidth.
double TimeRawWrite(const fs::path& dir, uint64_t bytes) {
  const std::string path = (dir / "raw_write.bin").string();
  bytes = bytes / 4096 * 4096;
  char* block = static_cast<char*>(std::aligned_alloc(4096, kBlockBytes));
  std::memset(block, 1, kBlockBytes);
  const double seconds = SecondsOf([&] {
    const int fd =
        open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    for (uint64_t done = 0; done < bytes;) {
      const size_t length = std::min<uint64_t>(kBlockBytes, bytes - done);
      if (write(fd, block, length) != static_cast<ssize_t>(length)) {
        std::printf("raw write failed\n");
        break;
      }
      done += length;
    }
    fsync(fd);
    close(fd);
  });
  std::free(block);
  fs::remove(path);
  return seconds;
}

// Seconds to read every file under `dir` in kBlockBytes blocks; `*bytes`
// gets how many.
double TimeRawRead(const fs::path& dir, uint64_t* bytes) {
  std::vector<char> block(kBlockBytes);
  *bytes = 0;
  return SecondsOf([&] {
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      const int fd = open(entry.path().c_str(), O_RDONLY);
      ssize_t n = 0;
      while ((n = read(fd, block.data(), block.size())) > 0) *bytes += n;
      close(fd);
    }
  });
}

std::unique_ptr<LocalWorker> StartDaemon(std::vector<std::string> flags) {
  LocalWorkerOptions options;
  options.flags = std::move(flags);
  options.start_timeout = absl::Minutes(5);
  absl::StatusOr<std::unique_ptr<LocalWorker>> worker =
      LocalWorker::Start(options);
  if (!worker.ok()) {
    std::printf("cannot start a daemon: %s\n",
                worker.status().ToString().c_str());
    return nullptr;
  }
  return *std::move(worker);
}

// The model and its Adam on one daemon, and one training iteration on it.
struct Trainee {
  std::unique_ptr<LocalWorker> daemon;
  std::vector<uint64_t> parameter_ids;
  uint64_t optimizer_id = 0;

  // With `biases`, each weight is followed by a bias of kSize values.
  std::vector<uint64_t> bias_ids;

  bool Create(Client& client, bool biases = false) {
    for (int layer = 0; layer < kLayers; ++layer) {
      auto parameter = client.CreateParameter(
          daemon->address(), absl::StrCat("layer", layer, ".weight"),
          DType::kFloat32, {kSize, kSize}, init::Normal(0.0, 0.02, layer));
      if (!parameter.ok()) return false;
      parameter_ids.push_back(parameter->id);
      if (!biases) continue;
      auto bias = client.CreateParameter(
          daemon->address(), absl::StrCat("layer", layer, ".bias"),
          DType::kFloat32, {kSize}, init::Normal(0.0, 0.02, layer));
      if (!bias.ok()) return false;
      bias_ids.push_back(bias->id);
    }
    std::vector<uint64_t> all = parameter_ids;
    all.insert(all.end(), bias_ids.begin(), bias_ids.end());
    auto adam = client.CreateOptimizer(daemon->address(), "adam",
                                       {{"lr", hyper::Number(1e-3)}}, all);
    if (!adam.ok()) return false;
    optimizer_id = adam->id();
    return true;
  }

  // Pushes gradients into `count` contexts, then steps them back to back
  // (as a trainer whose forward and backward are fast would), adding each
  // step's seconds to `steps`.
  bool Batch(Client& client, const Tensor& gradient, int count,
             std::vector<double>* steps) {
    std::vector<uint64_t> contexts;
    for (int c = 0; c < count; ++c) {
      contexts.push_back(client.NewContextId());
      for (uint64_t id : parameter_ids) {
        if (!client
                 .AccumulateGradients(daemon->address(), contexts.back(),
                                      {{id, gradient}})
                 .ok()) {
          return false;
        }
      }
    }
    bool ok = true;
    for (uint64_t context_id : contexts) {
      steps->push_back(SecondsOf([&] {
        ok =
            ok && client.Step(daemon->address(), optimizer_id, context_id).ok();
      }));
    }
    for (uint64_t context_id : contexts) {
      ok = ok && client.ReleaseContext(daemon->address(), context_id).ok();
    }
    return ok;
  }

  // `count` training iterations as a trainer runs them: each pushes the
  // gradients into a context of its own, then steps (and releases it),
  // adding each iteration's seconds to `iterations`. With `save`, a
  // checkpoint is saved on demand meanwhile, begun with the first step.
  bool Iterations(Client& client, const Tensor& gradient, int count, bool save,
                  std::vector<double>* iterations) {
    bool ok = true;
    std::thread saver;
    absl::Status saved;
    for (int i = 0; i < count && ok; ++i) {
      if (save && i == 1) {
        saver = std::thread(
            [&] { saved = client.SaveCheckpoint(daemon->address()).status(); });
      }
      const uint64_t context_id = client.NewContextId();
      iterations->push_back(SecondsOf([&] {
        for (uint64_t id : parameter_ids) {
          ok = ok && client
                         .AccumulateGradients(daemon->address(), context_id,
                                              {{id, gradient}})
                         .ok();
        }
        ok =
            ok && client.Step(daemon->address(), optimizer_id, context_id).ok();
      }));
      ok = ok && client.ReleaseContext(daemon->address(), context_id).ok();
    }
    if (saver.joinable()) saver.join();
    return ok && saved.ok();
  }
};

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

// Restores of the newest checkpoint in `folder`, cold, each against
// reading the same files cold just before: this machine's disk and memory
// vary by 2x from one second to the next, so pairs are taken kRestores
// times and their median reported.
constexpr int kRestores = 5;
struct Restored {
  uint64_t bytes = 0;
  std::vector<double> seconds;      // Start to serving, less an empty
                                    // daemon's.
  std::vector<double> raw_read;     // Reading the files.
  std::vector<double> empty_start;  // An empty daemon's start to serving.
  bool cold = false;                // Whether the page cache was dropped.

  void Print() const {
    const double mib = 1 << 20;
    std::vector<double> ratios;
    for (size_t i = 0; i < seconds.size(); ++i) {
      ratios.push_back(raw_read[i] / seconds[i]);
    }
    std::printf(
        "restore: %.0f MiB in %.3f s (start to serving, less an empty "
        "daemon's start %.3f s) = %.0f MiB/s; reading the files: %.0f MiB/s; "
        "restore/read %.2f (goal >= 0.7; medians of %zu pairs, the ratio "
        "from %.2f to %.2f)%s\n",
        bytes / mib, Median(seconds), Median(empty_start),
        bytes / Median(seconds) / mib, bytes / Median(raw_read) / mib,
        Median(ratios), ratios.size(),
        *std::min_element(ratios.begin(), ratios.end()),
        *std::max_element(ratios.begin(), ratios.end()),
        cold ? ", page cache dropped before each"
             : "; the page cache could not be dropped (not root): both warm");
  }
};

std::optional<Restored> MeasureRestore(const fs::path& folder) {
  Restored restored;
  std::unique_ptr<LocalWorker> daemon;
  for (int i = 0; i < kRestores; ++i) {
    // The empty daemon starts cold too: the restoring one loads its
    // program and libraries from the disk as well.
    restored.cold = DropPageCache();
    const double empty_start = SecondsOf([&] { daemon = StartDaemon({}); });
    if (daemon == nullptr) return std::nullopt;
    daemon.reset();
    restored.empty_start.push_back(empty_start);
    // Only the newest checkpoint is read at a restore.
    DropPageCache();
    restored.raw_read.push_back(
        TimeRawRead(folder / "parameters", &restored.bytes));
    DropPageCache();
    const double start = SecondsOf(
        [&] { daemon = StartDaemon({"--checkpoint_dir=" + folder.string()}); });
    if (daemon == nullptr) return std::nullopt;
    daemon.reset();
    restored.seconds.push_back(start - empty_start);
  }
  return restored;
}

double Mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0 : sum / values.size();
}

int Run(const fs::path& root, bool keep) {
  fs::remove_all(root);
  fs::create_directories(root);
  Client client;
  Tensor gradient = *Tensor::AllocateHost(DType::kFloat32, {kSize, kSize});
  for (float& x : gradient.host_span<float>()) x = 1e-3f;
  const double model_mib = kLayers * kSize * kSize * 4.0 / (1 << 20);
  std::printf("model: %d x %lld x %lld fp32 (%.0f MiB), Adam; folder %s\n",
              kLayers, static_cast<long long>(kSize),
              static_cast<long long>(kSize), model_mib, root.c_str());

  // Two daemons, with and without periodic checkpoints, stepped in turn.
  Trainee plain;
  Trainee periodic;
  // Saves only on demand (the iterations below).
  plain.daemon =
      StartDaemon({"--checkpoint_dir=" + (root / "on_demand").string()});
  periodic.daemon =
      StartDaemon({"--checkpoint_dir=" + (root / "periodic").string(),
                   absl::StrCat("--checkpoint_every_steps=", kEverySteps)});
  if (plain.daemon == nullptr || periodic.daemon == nullptr ||
      !plain.Create(client) || !periodic.Create(client)) {
    std::printf("cannot set the model up\n");
    return 1;
  }
  // Half a period first, so that every save begins in the middle of a
  // batch of back-to-back steps, where a step can wait for it.
  std::vector<double> plain_steps, periodic_steps, warmup;
  for (Trainee* trainee : {&plain, &periodic}) {
    if (!trainee->Batch(client, gradient, kEverySteps / 2, &warmup)) {
      std::printf("a step failed\n");
      return 1;
    }
  }
  for (int batch = 0; batch < kBatches; ++batch) {
    // In alternating order, so that neither daemon always runs right after
    // the other.
    Trainee* order[2] = {&plain, &periodic};
    if (batch % 2 == 1) std::swap(order[0], order[1]);
    for (Trainee* trainee : order) {
      if (!trainee->Batch(client, gradient, kEverySteps,
                          trainee == &plain ? &plain_steps : &periodic_steps)) {
        std::printf("a step failed\n");
        return 1;
      }
    }
  }
  const double overhead_step = Mean(periodic_steps) / Mean(plain_steps) - 1;
  // Whole training iterations (push, then step) on one daemon, batches of
  // ten with a save begun at the first step alternating with batches
  // without: two daemons differ by more in iteration time on a shared
  // machine (where their memory lies, what else runs) than a save adds.
  std::vector<double> saving_iterations, quiet_iterations;
  for (int batch = 0; batch < 2 * kIterationBatches; ++batch) {
    const bool save = batch % 2 == 1;
    if (!plain.Iterations(client, gradient, kEverySteps, save,
                          save ? &saving_iterations : &quiet_iterations)) {
      std::printf("an iteration or a save failed\n");
      return 1;
    }
  }
  const double overhead_iteration =
      Mean(saving_iterations) / Mean(quiet_iterations) - 1;
  const double slowest_plain =
      *std::max_element(plain_steps.begin(), plain_steps.end());
  const double slowest_periodic =
      *std::max_element(periodic_steps.begin(), periodic_steps.end());

  // One save on demand, its write against the raw disk.
  absl::StatusOr<v1::CheckpointInfo> saved =
      client.SaveCheckpoint(periodic.daemon->address());
  if (!saved.ok()) {
    std::printf("Save failed: %s\n", saved.status().ToString().c_str());
    return 1;
  }
  const double raw_write =
      TimeRawWrite(root, static_cast<uint64_t>(saved->bytes()));
  const double save_bandwidth = saved->bytes() / saved->write_seconds();
  const double raw_write_bandwidth = saved->bytes() / raw_write;

  absl::StatusOr<int> stopped = periodic.daemon->Stop();
  periodic.daemon.reset();
  if (!stopped.ok() || *stopped != 0) {
    std::printf("the checkpointing daemon did not stop cleanly\n");
    return 1;
  }
  const std::optional<Restored> restored = MeasureRestore(root / "periodic");
  if (!restored.has_value()) return 1;
  const double mib = 1 << 20;
  std::printf(
      "\nwrite: a save of %.0f MiB wrote at %.0f MiB/s (copy under the locks "
      "%.3f s); the disk, fsync'd sequential writes of as many bytes: %.0f "
      "MiB/s; save/disk %.2f (goal >= 0.7)\n",
      saved->bytes() / mib, save_bandwidth / mib, saved->snapshot_seconds(),
      raw_write_bandwidth / mib, save_bandwidth / raw_write_bandwidth);
  std::printf(
      "overhead of --checkpoint_every_steps=%d, steps back to back (%d "
      "steps, %d saves): a step %.4f s vs %.4f s without, %+.1f %% (goal "
      "<= 5 %%); the slowest step %.3f s vs %.3f s\n",
      kEverySteps, kBatches * kEverySteps, kBatches, Mean(periodic_steps),
      Mean(plain_steps), 100 * overhead_step, slowest_periodic, slowest_plain);
  std::printf(
      "overhead of a checkpoint every %d training iterations (gradients "
      "pushed, then the step), one daemon, batches with a save and without "
      "alternating (%d iterations each way): %.4f s vs %.4f s, %+.1f %% "
      "(goal <= 5 %%)\n",
      kEverySteps, kIterationBatches * kEverySteps, Mean(saving_iterations),
      Mean(quiet_iterations), 100 * overhead_iteration);
  restored->Print();
  if (!keep) fs::remove_all(root);
  return 0;
}

// --save_only: the model (with --biases, each weight followed by a bias of
// kSize values, as torch's Linear has: 8000 bytes, so that no value after
// the first bias lies on a 512-byte boundary of the files), one Adam step,
// saved as its daemon stops, in FOLDER/periodic: for --restore_only.
int SaveOnly(const fs::path& root, bool biases) {
  fs::remove_all(root);
  fs::create_directories(root);
  Client client;
  Trainee trainee;
  trainee.daemon =
      StartDaemon({"--checkpoint_dir=" + (root / "periodic").string()});
  if (trainee.daemon == nullptr || !trainee.Create(client, biases)) {
    std::printf("cannot set the model up\n");
    return 1;
  }
  Tensor gradient = *Tensor::AllocateHost(DType::kFloat32, {kSize, kSize});
  Tensor bias_gradient = *Tensor::AllocateHost(DType::kFloat32, {kSize});
  for (Tensor* g : {&gradient, &bias_gradient}) {
    for (float& x : g->host_span<float>()) x = 1e-3f;
  }
  const uint64_t context_id = client.NewContextId();
  bool ok = true;
  for (uint64_t id : trainee.parameter_ids) {
    ok = ok && client
                   .AccumulateGradients(trainee.daemon->address(), context_id,
                                        {{id, gradient}})
                   .ok();
  }
  for (uint64_t id : trainee.bias_ids) {
    ok = ok && client
                   .AccumulateGradients(trainee.daemon->address(), context_id,
                                        {{id, bias_gradient}})
                   .ok();
  }
  ok = ok &&
       client.Step(trainee.daemon->address(), trainee.optimizer_id, context_id)
           .ok();
  absl::StatusOr<int> stopped = trainee.daemon->Stop();
  if (!ok || !stopped.ok() || *stopped != 0) {
    std::printf("the step or the save failed\n");
    return 1;
  }
  std::printf("saved in %s\n", (root / "periodic").c_str());
  return 0;
}

}  // namespace
}  // namespace distopt

int main(int argc, char** argv) {
  std::string folder = "/var/tmp/distopt_checkpoint_bench";
  bool keep = false;
  bool restore_only = false;
  bool save_only = false;
  bool biases = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--keep") {
      keep = true;
    } else if (arg == "--restore_only") {
      restore_only = true;
    } else if (arg == "--save_only") {
      save_only = true;
    } else if (arg == "--biases") {
      biases = true;
    } else if (arg.rfind("--", 0) == 0) {
      std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
      return 2;
    } else {
      folder = arg;
    }
  }
  if (save_only) return distopt::SaveOnly(folder, biases);
  if (restore_only) {
    if (!std::filesystem::is_directory(std::filesystem::path(folder) /
                                       "periodic" / "parameters")) {
      std::fprintf(stderr,
                   "%s/periodic holds no checkpoint: run with --keep first\n",
                   folder.c_str());
      return 2;
    }
    const auto restored =
        distopt::MeasureRestore(std::filesystem::path(folder) / "periodic");
    if (!restored.has_value()) return 1;
    restored->Print();
    return 0;
  }
  return distopt::Run(folder, keep);
}
