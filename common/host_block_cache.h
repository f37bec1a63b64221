// HostBlockCache: large host allocations that are kept for reuse.
//
// A fresh large block costs a page fault and a page clear per 4 KiB on first
// touch, which costs more than the copy that fills it. Parameter writes swap
// a staging block for the old values, and optimizer steps allocate the same
// sizes again and again, so the CPU backend keeps freed large blocks (up to
// a byte limit) and hands them out again to allocations of the same size
// in pages. Small blocks go straight to malloc. Thread-safe.
#ifndef DISTOPT_COMMON_HOST_BLOCK_CACHE_H_
#define DISTOPT_COMMON_HOST_BLOCK_CACHE_H_

#include <cstddef>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace distopt {

class HostBlockCache {
 public:
  // Blocks of at least this many bytes are mapped with mmap and cached.
  static constexpr size_t kLargeBlockBytes = size_t{1} << 20;

  explicit HostBlockCache(size_t max_cached_bytes)
      : max_cached_bytes_(max_cached_bytes) {}
  ~HostBlockCache();
  HostBlockCache(const HostBlockCache&) = delete;
  HostBlockCache& operator=(const HostBlockCache&) = delete;

  // 64-byte aligned memory of at least `bytes` bytes, or null when the
  // system has none.
  void* Allocate(size_t bytes) ABSL_LOCKS_EXCLUDED(mutex_);
  void Free(void* pointer) ABSL_LOCKS_EXCLUDED(mutex_);

  size_t cached_bytes() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  const size_t max_cached_bytes_;
  mutable absl::Mutex mutex_;
  // Large blocks handed out: pointer -> mapped size.
  absl::flat_hash_map<void*, size_t> live_ ABSL_GUARDED_BY(mutex_);
  // Freed large blocks by mapped size.
  std::multimap<size_t, void*> free_ ABSL_GUARDED_BY(mutex_);
  size_t cached_bytes_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace distopt

#endif  // DISTOPT_COMMON_HOST_BLOCK_CACHE_H_
