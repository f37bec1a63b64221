#include "common/host_block_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

namespace distopt {
namespace {

constexpr size_t kAlignment = 64;
// The system's page (4 KiB on x86-64; 64 KiB on some arm64 kernels).
size_t PageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}
constexpr size_t kHugePageBytes = size_t{2} << 20;

size_t RoundUp(size_t bytes, size_t multiple) {
  return (bytes + multiple - 1) / multiple * multiple;
}

// `size` bytes (a multiple of the page) of fresh memory. Blocks of a huge
// page or more start on a huge page boundary and ask for huge pages (a
// fault per 2 MiB instead of per 4 KiB); the block stays `size` bytes, so
// a huge page never backs memory past its end: a 1 MiB tensor costs 1 MiB
// of RSS, not 2.
void* MapBlock(size_t size) {
  if (size < kHugePageBytes) {
    void* pointer = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return pointer == MAP_FAILED ? nullptr : pointer;
  }
  // Map a huge page more than needed, then unmap the unaligned head and
  // the tail past the block.
  const size_t mapped = size + kHugePageBytes - PageBytes();
  void* pointer = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pointer == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(pointer);
  const uintptr_t aligned = RoundUp(start, kHugePageBytes);
  if (aligned > start) munmap(pointer, aligned - start);
  const uintptr_t end = start + mapped;
  if (end > aligned + size) {
    munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  }
  void* block = reinterpret_cast<void*>(aligned);
  madvise(block, size, MADV_HUGEPAGE);  // A hint; fine if refused.
  return block;
}

}  // namespace

HostBlockCache::~HostBlockCache() {
  absl::MutexLock lock(&mutex_);
  for (const auto& [size, pointer] : free_) munmap(pointer, size);
}

void* HostBlockCache::Allocate(size_t bytes) {
  if (bytes < kLargeBlockBytes) {
    return std::aligned_alloc(kAlignment,
                              RoundUp(bytes == 0 ? 1 : bytes, kAlignment));
  }
  const size_t size = RoundUp(bytes, PageBytes());
  {
    absl::MutexLock lock(&mutex_);
    auto it = free_.find(size);
    if (it != free_.end()) {
      void* pointer = it->second;
      free_.erase(it);
      cached_bytes_ -= size;
      live_[pointer] = size;
      return pointer;
    }
  }
  void* pointer = MapBlock(size);
  if (pointer == nullptr) return nullptr;
  absl::MutexLock lock(&mutex_);
  live_[pointer] = size;
  return pointer;
}

void HostBlockCache::Free(void* pointer) {
  if (pointer == nullptr) return;
  size_t size = 0;
  {
    absl::MutexLock lock(&mutex_);
    auto it = live_.find(pointer);
    if (it == live_.end()) {
      std::free(pointer);  // A small block from aligned_alloc.
      return;
    }
    size = it->second;
    live_.erase(it);
    if (cached_bytes_ + size <= max_cached_bytes_) {
      free_.emplace(size, pointer);
      cached_bytes_ += size;
      return;
    }
  }
  munmap(pointer, size);
}

size_t HostBlockCache::cached_bytes() const {
  absl::MutexLock lock(&mutex_);
  return cached_bytes_;
}

}  // namespace distopt
