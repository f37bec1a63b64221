#include "common/host_block_cache.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace distopt {
namespace {

TEST(HostBlockCacheTest, ReusesFreedLargeBlocksOfTheSameSizeInPages) {
  HostBlockCache cache(size_t{64} << 20);
  void* a = cache.Allocate(size_t{3} << 20);
  ASSERT_NE(a, nullptr);
  // Large blocks start on a huge page.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % (size_t{2} << 20), 0u);
  std::memset(a, 7, size_t{3} << 20);
  cache.Free(a);
  EXPECT_EQ(cache.cached_bytes(), size_t{3} << 20);
  // 3 MiB less 100 bytes is the same number of pages.
  void* b = cache.Allocate((size_t{3} << 20) - 100);
  EXPECT_EQ(b, a);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  // Another size maps a new block.
  void* c = cache.Allocate((size_t{3} << 20) + 1);
  EXPECT_NE(c, a);
  cache.Free(b);
  cache.Free(c);
  EXPECT_EQ(cache.cached_bytes(), (size_t{6} << 20) + 4096);
}

int64_t ResidentKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// A block costs its bytes of memory, not the huge pages around it: 1 MiB
// blocks rounded up to 2 MiB (and backed by huge pages) cost twice their
// size.
TEST(HostBlockCacheTest, BlocksCostTheirSizeInMemory) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer's shadow memory grows the RSS measured";
#endif
  HostBlockCache cache(0);
  constexpr int kBlocks = 32;
  for (size_t bytes : {size_t{1} << 20, (size_t{5} << 20) / 2}) {
    const int64_t before = ResidentKiB();
    std::vector<void*> blocks;
    for (int b = 0; b < kBlocks; ++b) {
      blocks.push_back(cache.Allocate(bytes));
      ASSERT_NE(blocks.back(), nullptr);
      std::memset(blocks.back(), 1, bytes);
    }
    const int64_t rise_kib = ResidentKiB() - before;
    EXPECT_LE(rise_kib * 1024, kBlocks * bytes * 9 / 8)
        << kBlocks << " blocks of " << bytes << " bytes";
    for (void* block : blocks) cache.Free(block);
  }
}

TEST(HostBlockCacheTest, KeepsAtMostTheLimit) {
  HostBlockCache cache(size_t{4} << 20);
  void* a = cache.Allocate(size_t{4} << 20);
  void* b = cache.Allocate(size_t{4} << 20);
  cache.Free(a);
  cache.Free(b);  // Over the limit: returned to the system.
  EXPECT_EQ(cache.cached_bytes(), size_t{4} << 20);
}

TEST(HostBlockCacheTest, SmallBlocksAreNotCached) {
  HostBlockCache cache(size_t{64} << 20);
  void* small = cache.Allocate(100);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 64, 0u);
  cache.Free(small);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  void* empty = cache.Allocate(0);
  EXPECT_NE(empty, nullptr);
  cache.Free(empty);
}

// Blocks taken and given back by many threads at once (run under
// --config=tsan too): no block is handed to two holders, and the cache
// keeps to its limit.
TEST(HostBlockCacheTest, ManyThreadsNeverShareABlock) {
  constexpr size_t kLimit = size_t{6} << 20;
  HostBlockCache cache(kLimit);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      const size_t bytes = (size_t{1} + t % 2) << 20;
      for (int i = 0; i < 200; ++i) {
        auto* block = static_cast<uint64_t*>(cache.Allocate(bytes));
        ASSERT_NE(block, nullptr);
        const uint64_t mark = (uint64_t{1} + t) << 32 | i;
        const size_t last = bytes / sizeof(uint64_t) - 1;
        block[0] = mark;
        block[last] = mark;
        std::this_thread::yield();
        ASSERT_EQ(block[0], mark) << "another holder wrote the block";
        ASSERT_EQ(block[last], mark) << "another holder wrote the block";
        cache.Free(block);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(cache.cached_bytes(), kLimit);
}

}  // namespace
}  // namespace distopt
