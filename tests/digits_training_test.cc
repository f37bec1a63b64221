// The demo's training, with a fixed seed: two real daemons, layer 1 on one
// and layer 2 on the other, reach at least 0.95 held-out accuracy.
#include "client/examples/digits_training.h"

#include <cstdlib>

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
