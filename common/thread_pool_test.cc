#include "common/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace distopt {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 7, 1000, 65537}) {
    for (int64_t grain : {1, 100, 1 << 16}) {
      std::vector<std::atomic<int>> seen(n);
      pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
        ASSERT_LE(begin, end);
        for (int64_t i = begin; i < end; ++i) seen[i]++;
      });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(seen[i].load(), 1) << "n=" << n << " grain=" << grain;
      }
    }
  }
}

TEST(ThreadPoolTest, SplitsLargeWorkAcrossThreads) {
  ThreadPool pool(3);
  std::atomic<int> ranges{0};
  pool.ParallelFor(300, 100, [&](int64_t, int64_t) { ranges++; });
  EXPECT_EQ(ranges.load(), 3);
  ranges = 0;
  pool.ParallelFor(300, 1000, [&](int64_t, int64_t) { ranges++; });
  EXPECT_EQ(ranges.load(), 1);  // Below the grain: the caller does it all.
}

TEST(ThreadPoolTest, SeveralCallersShareThePool) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 50; ++r) {
        pool.ParallelFor(1000, 10, [&](int64_t begin, int64_t end) {
          total += end - begin;
        });
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(total.load(), 4 * 50 * 1000);
}

}  // namespace
}  // namespace distopt
