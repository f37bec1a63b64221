#include "server/services/stream_limits.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/server_context.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

// Contexts outside a call all have the same (empty) peer: one connection.
TEST(StreamLimitsTest, BoundsPerConnectionAndInAll) {
  StreamLimits limits({/*total=*/3, /*per_connection=*/2, absl::Seconds(30)});
  grpc::ServerContext a, b, c;
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> first =
      limits.Acquire(&a, "ReadParameter");
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> second =
      limits.Acquire(&b, "ReadParameter");
  ASSERT_TRUE(first.ok() && second.ok());
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> third =
      limits.Acquire(&c, "WriteParameter");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(),
              HasSubstr("WriteParameter: 2 streams are open on this "
                        "connection; expected at most 2 "
                        "(--max_streams_per_connection)"));
  first->reset();  // Its slot is free again.
  EXPECT_TRUE(limits.Acquire(&c, "WriteParameter").ok());
}

TEST(StreamLimitsTest, TheTotalBoundNamesItsFlag) {
  StreamLimits limits({/*total=*/1, /*per_connection=*/1, absl::Seconds(30)});
  grpc::ServerContext a, b;
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> held =
      limits.Acquire(&a, "StepStream");
  ASSERT_TRUE(held.ok());
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> refused =
      limits.Acquire(&b, "Watch");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("(--max_streams)"));
}

// A stream at work when the daemon closes finishes its request, then takes
// no other.
TEST(StreamLimitsTest, CloseLetsAWorkingStreamReplyThenRefusesMore) {
  StreamLimits limits(StreamLimitOptions{});
  grpc::ServerContext context;
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      limits.Acquire(&context, "StepStream");
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE((*slot)->AwaitRequest());
  ASSERT_TRUE((*slot)->BeginWork());
  limits.Close();
  EXPECT_FALSE((*slot)->AwaitRequest());
}

// Calls taking and giving back slots from many threads at once (run under
// --config=tsan too) never hold more than the bound.
TEST(StreamLimitsTest, ManyThreadsNeverHoldMoreThanTheBound) {
  constexpr int kTotal = 4;
  StreamLimits limits({kTotal, kTotal, absl::Seconds(30)});
  std::atomic<int> held{0};
  std::atomic<int> most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        grpc::ServerContext context;
        absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
            limits.Acquire(&context, "StepStream");
        if (!slot.ok()) {
          ASSERT_EQ(slot.status().code(), absl::StatusCode::kResourceExhausted);
          continue;
        }
        const int now = ++held;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        (*slot)->BeginWait();
        (*slot)->EndWait();
        ASSERT_TRUE((*slot)->AwaitRequest());
        ASSERT_TRUE((*slot)->BeginWork());
        --held;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(most.load(), kTotal);
  EXPECT_GE(most.load(), 1);
  limits.Close();
}

}  // namespace
}  // namespace distopt
