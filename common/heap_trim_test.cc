// The trim before a step gives glibc's freed heap memory back to the
// system, and only when there is enough of it. Memory freed by another
// thread (in its own arena, as the daemon's server threads free pushed
// gradients) counts too.
#include "common/heap_trim.h"

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/base/config.h"
#include "common/resident_memory.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

// On a thread of its own: `blocks` blocks of 64 KiB (below glibc's mmap
// threshold, so they come from a heap) written to, one more kept above
// them (so that freeing them cannot shrink the heap from its top), then
// all but that one freed. Returns the kept one.
void* FreeBlocksOnAnotherThread(int blocks) {
  void* kept = nullptr;
  std::thread thread([&] {
    std::vector<void*> freed;
    for (int i = 0; i < blocks; ++i) {
      freed.push_back(std::malloc(64 << 10));
      std::memset(freed.back(), 1, 64 << 10);
    }
    kept = std::malloc(64 << 10);
    std::memset(kept, 1, 64 << 10);
    for (void* block : freed) std::free(block);
  });
  thread.join();
  return kept;
}

#if defined(ABSL_HAVE_ADDRESS_SANITIZER) || \
    defined(ABSL_HAVE_THREAD_SANITIZER) || defined(ABSL_HAVE_MEMORY_SANITIZER)
#define DISTOPT_SANITIZER_ALLOCATOR 1
#endif

TEST(HeapTrimTest, FreedHeapGoesBackOnlyWhenThereIsEnough) {
#ifdef DISTOPT_SANITIZER_ALLOCATOR
  GTEST_SKIP() << "a sanitizer's allocator replaces glibc's heaps";
#endif
  // 2 MiB free: under the threshold, kept for reuse.
  void* small = FreeBlocksOnAnotherThread(32);
  const int64_t before_small = ResidentBytes();
  EXPECT_FALSE(ReturnFreedHeap());
  EXPECT_GE(ResidentBytes(), before_small - (int64_t{512} << 10));

  // 16 MiB free: back to the system.
  void* large = FreeBlocksOnAnotherThread(256);
  const int64_t before = ResidentBytes();
  ASSERT_GT(before, 0);
  EXPECT_TRUE(ReturnFreedHeap());
  EXPECT_LE(ResidentBytes(), before - (int64_t{12} << 20));
  std::free(small);
  std::free(large);
}

}  // namespace
}  // namespace distopt
