// The quick-start demo: two worker daemons on loopback train a two-layer
// MLP on the UCI hand-written digits (layer 1 on worker A, layer 2 on
// worker B) with Adam through DistributedOptimizer, one distributed
// autograd context per mini-batch, then report the held-out accuracy.
//
//   bazel run //client/examples:digits_demo
#include <cstdio>
#include <cstdlib>
#include <string>

#include "client/examples/digits_training.h"
#include "client/local_worker.h"

namespace {

std::string DataPath() {
  for (const char* root : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* dir = std::getenv(root)) {
      return std::string(dir) + "/distopt/data/digits/digits.csv.gz";
    }
  }
  return "data/digits/digits.csv.gz";
}

}  // namespace

int main() {
  auto a = distopt::LocalWorker::Start({});
  auto b = distopt::LocalWorker::Start({});
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "cannot start the workers: %s\n",
                 (!a.ok() ? a.status() : b.status()).ToString().c_str());
    return 1;
  }
  std::printf("worker A (layer 1) on %s, worker B (layer 2) on %s\n",
              (*a)->address().c_str(), (*b)->address().c_str());
  distopt::DigitsOptions options;
  options.data_path = DataPath();
  options.worker_a = (*a)->address();
  options.worker_b = (*b)->address();
  options.on_epoch = [](int epoch, double loss, double accuracy) {
    std::printf("epoch %2d  loss %.4f  train accuracy %.3f\n", epoch, loss,
                accuracy);
    std::fflush(stdout);
  };
  absl::StatusOr<distopt::DigitsResult> result = distopt::TrainDigits(options);
  if (!result.ok()) {
    std::fprintf(stderr, "training failed: %s\n",
                 result.status().ToString().c_str());
    return 1;
  }
  std::printf("test accuracy %.4f on %d held-out digits (%d trained on)\n",
              result->test_accuracy, result->test_examples,
              result->train_examples);
  (*a)->Stop().IgnoreError();
  (*b)->Stop().IgnoreError();
  std::printf("stopped both workers\n");
  return result->test_accuracy >= 0.95 ? 0 : 2;
}
