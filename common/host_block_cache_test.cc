#include "common/host_block_cache.h"

#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"

namespace distopt {
namespace {

TEST(HostBlockCacheTest, ReusesFreedLargeBlocksOfTheSameRoundedSize) {
  HostBlockCache cache(size_t{64} << 20);
  void* a = cache.Allocate(size_t{3} << 20);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  std::memset(a, 7, size_t{3} << 20);
  cache.Free(a);
  EXPECT_EQ(cache.cached_bytes(), size_t{4} << 20);  // Rounded to 2 MiB.
  // 3.5 MiB rounds to the same 4 MiB block.
  void* b = cache.Allocate((size_t{7} << 20) / 2);
  EXPECT_EQ(b, a);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  // Another size maps a new block.
  void* c = cache.Allocate(size_t{8} << 20);
  EXPECT_NE(c, a);
  cache.Free(b);
  cache.Free(c);
  EXPECT_EQ(cache.cached_bytes(), size_t{12} << 20);
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
