#include "server/params/two_stage_pipeline.h"

#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::ElementsAre;

// Waits until `done` holds, for at most 10 s; returns whether it does.
template <typename Done>
bool WaitFor(Done done) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

TEST(TwoStagePipelineTest, EachBlockPassesBothStagesInOrder) {
  std::mutex mutex;
  std::vector<std::string> events;
  auto note = [&](std::string event) {
    std::lock_guard<std::mutex> lock(mutex);
    events.push_back(std::move(event));
  };
  std::vector<bool> first_done(5, false);
  std::vector<size_t> seconds;
  absl::Status status = RunTwoStages(
      5, 5,
      [&](size_t k) {
        note("first");
        std::lock_guard<std::mutex> lock(mutex);
        first_done[k] = true;
        return absl::OkStatus();
      },
      [&](size_t k) {
        std::lock_guard<std::mutex> lock(mutex);
        EXPECT_TRUE(first_done[k]) << k;
        seconds.push_back(k);
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_THAT(seconds, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(events.size(), 5u);
}

// A window of every block never holds the first stage back: all four
// blocks are read while the first one's second stage waits for them.
TEST(TwoStagePipelineTest, AWindowOfEveryBlockNeverHoldsTheFirstStage) {
  std::atomic<size_t> firsts{0};
  bool ran_ahead = false;
  std::vector<size_t> seconds;
  absl::Status status = RunTwoStages(
      4, std::numeric_limits<size_t>::max(),
      [&](size_t) {
        ++firsts;
        return absl::OkStatus();
      },
      [&](size_t k) {
        if (k == 0) ran_ahead = WaitFor([&] { return firsts == 4; });
        seconds.push_back(k);
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(ran_ahead);
  EXPECT_THAT(seconds, ElementsAre(0, 1, 2, 3));
}

// The calling thread helps while it waits: block 0's first stage waits
// (bounded) until meanwhile() has run three times. (One block alone runs
// on the calling thread: nothing to wait for.)
TEST(TwoStagePipelineTest, TheCallerWorksMeanwhileWhileItWaits) {
  std::atomic<int> calls{0};
  bool helped = false;
  absl::Status status = RunTwoStages(
      2, 2,
      [&](size_t) {
        if (helped) return absl::OkStatus();
        helped = WaitFor([&] { return calls >= 3; });
        return absl::OkStatus();
      },
      [](size_t) { return absl::OkStatus(); },
      [&] {
        ++calls;
        return true;
      });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(helped);
}

// Once meanwhile() says there is nothing left, the caller just waits.
TEST(TwoStagePipelineTest, MeanwhileStopsWhenItHasNothingLeft) {
  int calls = 0;
  absl::Status status = RunTwoStages(
      3, 3,
      [](size_t) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return absl::OkStatus();
      },
      [](size_t) { return absl::OkStatus(); },
      [&] {
        ++calls;
        return false;
      });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_LE(calls, 3);
}

TEST(TwoStagePipelineTest, OneBlockRunsBothStages) {
  std::vector<std::string> stages;
  EXPECT_TRUE(RunTwoStages(
                  1, 1,
                  [&](size_t) {
                    stages.push_back("first");
                    return absl::OkStatus();
                  },
                  [&](size_t) {
                    stages.push_back("second");
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_THAT(stages, ElementsAre("first", "second"));
  EXPECT_EQ(RunTwoStages(
                1, 1, [](size_t) { return absl::DataLossError("short"); },
                [&](size_t) {
                  stages.push_back("second again");
                  return absl::OkStatus();
                }),
            absl::DataLossError("short"));
  EXPECT_EQ(stages.size(), 2u);
}

TEST(TwoStagePipelineTest, NoBlocksRunNothing) {
  int runs = 0;
  EXPECT_TRUE(RunTwoStages(
                  0, 1, [&](size_t) { return ++runs, absl::OkStatus(); },
                  [&](size_t) { return ++runs, absl::OkStatus(); })
                  .ok());
  EXPECT_EQ(runs, 0);
}

// The point of it: block k + 1's first stage runs while block k's second
// does. Block 0's second stage waits until block 1's first has begun (it
// would wait forever, bounded here, if the stages took turns).
TEST(TwoStagePipelineTest, TheNextBlocksFirstStageRunsDuringTheSecond) {
  std::atomic<bool> second_block_started{false};
  bool overlapped = false;
  absl::Status status = RunTwoStages(
      2, 2,
      [&](size_t k) {
        if (k == 1) second_block_started = true;
        return absl::OkStatus();
      },
      [&](size_t k) {
        if (k == 0) {
          overlapped = WaitFor([&] { return second_block_started.load(); });
        }
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(overlapped);
}

// first(k) never begins before second(k - window) has returned: what lets
// a caller hand block k and block k + window the same buffer.
TEST(TwoStagePipelineTest, TheFirstStageStaysWithinTheWindow) {
  for (size_t window : {1, 2, 3}) {
    std::mutex mutex;
    size_t seconds_done = 0;
    std::vector<size_t> ahead_at_start;
    absl::Status status = RunTwoStages(
        12, window,
        [&](size_t k) {
          std::lock_guard<std::mutex> lock(mutex);
          ahead_at_start.push_back(k - seconds_done);
          return absl::OkStatus();
        },
        [&](size_t) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          std::lock_guard<std::mutex> lock(mutex);
          ++seconds_done;
          return absl::OkStatus();
        });
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(ahead_at_start.size(), 12u);
    for (size_t ahead : ahead_at_start) EXPECT_LT(ahead, window);
    // With a slow second stage, the first does run ahead as far as allowed.
    EXPECT_EQ(*std::max_element(ahead_at_start.begin(), ahead_at_start.end()),
              window - 1);
  }
}

TEST(TwoStagePipelineTest, AFirstStageErrorStopsBoth) {
  std::vector<size_t> firsts, seconds;
  absl::Status status = RunTwoStages(
      6, 6,
      [&](size_t k) {
        firsts.push_back(k);
        return k == 2 ? absl::DataLossError("block 2 is short")
                      : absl::OkStatus();
      },
      [&](size_t k) {
        seconds.push_back(k);
        return absl::OkStatus();
      });
  EXPECT_EQ(status, absl::DataLossError("block 2 is short"));
  EXPECT_THAT(firsts, ElementsAre(0, 1, 2));
  EXPECT_THAT(seconds, ::testing::IsSubsetOf({0u, 1u}));
}

TEST(TwoStagePipelineTest, ASecondStageErrorStopsBoth) {
  std::mutex mutex;
  std::vector<size_t> firsts, seconds;
  absl::Status status = RunTwoStages(
      8, 2,
      [&](size_t k) {
        std::lock_guard<std::mutex> lock(mutex);
        firsts.push_back(k);
        return absl::OkStatus();
      },
      [&](size_t k) {
        std::lock_guard<std::mutex> lock(mutex);
        seconds.push_back(k);
        return k == 1 ? absl::InternalError("cannot copy block 1")
                      : absl::OkStatus();
      });
  EXPECT_EQ(status, absl::InternalError("cannot copy block 1"));
  EXPECT_THAT(seconds, ElementsAre(0, 1));
  // Within the window of the failed block, and no further.
  EXPECT_LE(firsts.size(), 3u);
}

}  // namespace
}  // namespace distopt
