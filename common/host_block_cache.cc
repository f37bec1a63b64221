#include "common/host_block_cache.h"

#include <sys/mman.h>

#include <cstdlib>

namespace distopt {
namespace {

constexpr size_t kAlignment = 64;
// Large blocks are rounded to 2 MiB, the huge page size, so that same-sized
// tensors share cache entries and the kernel may back them with huge pages.
constexpr size_t kLargeRounding = size_t{2} << 20;

size_t RoundUp(size_t bytes, size_t multiple) {
  return (bytes + multiple - 1) / multiple * multiple;
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
  const size_t size = RoundUp(bytes, kLargeRounding);
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
  void* pointer = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pointer == MAP_FAILED) return nullptr;
  madvise(pointer, size, MADV_HUGEPAGE);  // A hint; fine if refused.
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
