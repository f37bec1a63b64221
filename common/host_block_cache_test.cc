#include "common/host_block_cache.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
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

}  // namespace
}  // namespace distopt
