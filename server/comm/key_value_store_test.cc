#include "server/comm/key_value_store.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

TEST(KeyValueStoreTest, SetGetAndAdd) {
  KeyValueStore store;
  EXPECT_EQ(store.Get("a").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store.Set("a", std::string("\0\1binary", 8)).ok());
  EXPECT_EQ(*store.Get("a"), std::string("\0\1binary", 8));
  EXPECT_EQ(*store.Add("n", 3), 3);
  EXPECT_EQ(*store.Add("n", -1), 2);
  EXPECT_EQ(*store.Get("n"), "2");
  EXPECT_THAT(store.Add("a", 1).status().message(), HasSubstr("not a counter"));
  EXPECT_EQ(store.Set("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Set(std::string(2000, 'k'), "x").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KeyValueStoreTest, WaitReturnsWhenEveryKeyIsSet) {
  KeyValueStore store;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    store.Set("x", "1").IgnoreError();
    store.Set("y", "2").IgnoreError();
  });
  EXPECT_TRUE(store.Wait({"x", "y"}, absl::Seconds(30)).ok());
  setter.join();
}

TEST(KeyValueStoreTest, WaitTimesOutNamingTheMissingKeys) {
  KeyValueStore store;
  ASSERT_TRUE(store.Set("here", "1").ok());
  absl::Status status =
      store.Wait({"here", "rank1/address"}, absl::Milliseconds(50));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("\"rank1/address\" not set"));
}

TEST(KeyValueStoreTest, AWaitEndsWhenItsCallerCancelsOrTheStoreCloses) {
  KeyValueStore store;
  std::atomic<bool> cancelled{false};
  absl::Status status;
  std::thread waiter([&] {
    status = store.Wait({"never"}, absl::Minutes(10),
                        [&] { return cancelled.load(); });
  });
  absl::SleepFor(absl::Milliseconds(100));
  cancelled = true;
  const absl::Time start = absl::Now();
  waiter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);

  std::thread closed(
      [&] { status = store.Wait({"never"}, absl::Minutes(10)); });
  absl::SleepFor(absl::Milliseconds(100));
  store.Close();
  closed.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  // Later waits are refused at once.
  EXPECT_EQ(store.Wait({"never"}, absl::Minutes(10)).code(),
            absl::StatusCode::kUnavailable);
}

TEST(KeyValueStoreTest, EntriesCountAgainstTheBudget) {
  MemoryBudget budget(0, 1000);
  KeyValueStore store(&budget);
  ASSERT_TRUE(store.Set("a", std::string(500, 'x')).ok());
  EXPECT_EQ(budget.used_bytes(), 1 + 500 + KeyValueStore::kEntryOverheadBytes);
  EXPECT_EQ(store.Set("b", std::string(500, 'x')).code(),
            absl::StatusCode::kResourceExhausted);
  // Replacing a value frees the old one's bytes.
  ASSERT_TRUE(store.Set("a", "short").ok());
  EXPECT_EQ(budget.used_bytes(), 1 + 5 + KeyValueStore::kEntryOverheadBytes);
  EXPECT_TRUE(store.Delete("a"));
  EXPECT_FALSE(store.Delete("a"));
  EXPECT_EQ(budget.used_bytes(), 0u);
}

TEST(KeyValueStoreTest, ConcurrentAddsAllCount) {
  KeyValueStore store;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) store.Add("barrier", 1).IgnoreError();
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(*store.Get("barrier"), "8000");
}

}  // namespace
}  // namespace distopt
