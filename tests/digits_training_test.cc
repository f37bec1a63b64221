// The demo's training, with a fixed seed: two real daemons, layer 1 on one
// and layer 2 on the other, reach at least 0.95 held-out accuracy.
#include "client/examples/digits_training.h"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/backend.h"
#include "gtest/gtest.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

TEST(DigitsTrainingTest, ReachesTheDemosAccuracy) {
  std::unique_ptr<LocalWorker> a = testing::StartWorkerOrDie();
  std::unique_ptr<LocalWorker> b = testing::StartWorkerOrDie();
  ASSERT_TRUE(a != nullptr && b != nullptr);
  DigitsOptions options;
  options.data_path = std::string(std::getenv("TEST_SRCDIR")) +
                      "/distopt/data/digits/digits.csv.gz";
  options.worker_a = a->address();
  options.worker_b = b->address();
  std::vector<double> losses;
  options.on_epoch = [&](int, double loss, double) { losses.push_back(loss); };
  absl::StatusOr<DigitsResult> result = TrainDigits(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->train_examples + result->test_examples, 1797);
  EXPECT_EQ(result->test_examples, 360);
  EXPECT_GE(result->test_accuracy, 0.95);
  ASSERT_EQ(losses.size(), 25u);
  EXPECT_LT(losses.back(), losses.front() / 10);
}

// Seeded chaos: the demo's training while its two workers, each saving a
// checkpoint every 5 steps, are SIGKILLed 20 times at random moments (some
// during a save) and restarted on the same port from their folders; the
// trainer tries a failed batch again. Each restart takes a worker back to
// its last checkpoint, and training still reaches the demo's accuracy.
TEST(DigitsTrainingTest, ReachesTheAccuracyThroughTwentyKillsOfItsWorkers) {
  const std::string root =
      std::string(std::getenv("TEST_TMPDIR")) + "/digits_chaos";
  struct Node {
    std::vector<std::string> flags;
    std::unique_ptr<LocalWorker> worker;
  };
  Node nodes[2];
  for (int n = 0; n < 2; ++n) {
    // A port of its own, to come back on after every kill.
    const std::string address = testing::ReusableAddress();
    ASSERT_FALSE(address.empty());
    nodes[n].flags = {absl::StrCat("--checkpoint_dir=", root, "/worker", n),
                      "--checkpoint_every_steps=5", "--listen=" + address};
    nodes[n].worker = testing::StartWorkerOrDie(nodes[n].flags);
    ASSERT_NE(nodes[n].worker, nullptr);
  }
  DigitsOptions options;
  options.data_path = std::string(std::getenv("TEST_SRCDIR")) +
                      "/distopt/data/digits/digits.csv.gz";
  options.worker_a = nodes[0].worker->address();
  options.worker_b = nodes[1].worker->address();
  options.epochs = 150;  // Long enough for the 20 kills, with room.
  options.retry_for = absl::Seconds(30);

  std::atomic<bool> trained{false};
  std::atomic<int> kills{0};
  std::atomic<int> failed_restarts{0};
  std::thread chaos([&] {
    // A worker killed before its first checkpoint of the model would come
    // back empty: the kills begin once both have one.
    Client watcher;
    for (Node& node : nodes) {
      const bool saved = testing::PollUntil(
          [&] {
            absl::StatusOr<v1::ListCheckpointsResponse> listed =
                watcher.ListCheckpoints(node.worker->address());
            return trained || (listed.ok() && listed->checkpoints_size() > 0 &&
                               listed->checkpoints(0).parameters() > 0);
          },
          absl::Seconds(30));
      if (!saved) ++failed_restarts;
    }
    std::mt19937 random(20261130);
    while (kills < 20 && !trained) {
      absl::SleepFor(absl::Milliseconds(
          std::uniform_int_distribution<int>(10, 60)(random)));
      Node& node = nodes[std::uniform_int_distribution<int>(0, 1)(random)];
      node.worker->Signal(SIGKILL);
      if (!node.worker->Wait(absl::Seconds(30)).ok()) ++failed_restarts;
      LocalWorkerOptions restart;
      restart.flags = node.flags;
      absl::StatusOr<std::unique_ptr<LocalWorker>> again =
          LocalWorker::Start(restart);
      if (!again.ok()) {
        ++failed_restarts;
        return;
      }
      node.worker = *std::move(again);
      ++kills;
    }
  });
  absl::StatusOr<DigitsResult> result = TrainDigits(options);
  trained = true;
  chaos.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(kills, 20);
  EXPECT_EQ(failed_restarts, 0);
  EXPECT_GE(result->test_accuracy, 0.95);
}

// The same training with both layers' parameters on the GPU: cuBLAS
// forward and backward, gradients accumulated and stepped there. Skipped
// without a GPU.
TEST(DigitsTrainingTest, ReachesTheAccuracyWithParametersOnTheGpu) {
  absl::StatusOr<std::shared_ptr<Backend>> gpu = GetBackend(Device::Cuda(0));
  if (!gpu.ok()) GTEST_SKIP() << "no CUDA GPU: " << gpu.status().message();
  std::unique_ptr<LocalWorker> a =
      testing::StartWorkerOrDie({"--device=cuda:0"});
  std::unique_ptr<LocalWorker> b =
      testing::StartWorkerOrDie({"--device=cuda:0"});
  ASSERT_TRUE(a != nullptr && b != nullptr);
  DigitsOptions options;
  options.data_path = std::string(std::getenv("TEST_SRCDIR")) +
                      "/distopt/data/digits/digits.csv.gz";
  options.worker_a = a->address();
  options.worker_b = b->address();
  absl::StatusOr<DigitsResult> result = TrainDigits(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GE(result->test_accuracy, 0.95);
}

TEST(DigitsTrainingTest, TheDataHasTheUciShape) {
  absl::StatusOr<DigitsData> data =
      LoadDigits(std::string(std::getenv("TEST_SRCDIR")) +
                 "/distopt/data/digits/digits.csv.gz");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->labels.size(), 1797u);
  for (size_t i = 0; i < data->labels.size(); ++i) {
    ASSERT_GE(data->labels[i], 0);
    ASSERT_LE(data->labels[i], 9);
    for (float pixel : data->pixels[i]) {
      ASSERT_GE(pixel, 0.0f);
      ASSERT_LE(pixel, 16.0f);
    }
  }
}

}  // namespace
}  // namespace distopt
