// Returning the heap's freed memory to the system before a step, where a
// data-parallel rank's memory peaks.
#ifndef DISTOPT_COMMON_HEAP_TRIM_H_
#define DISTOPT_COMMON_HEAP_TRIM_H_

#include <cstddef>

namespace distopt {

// A step is where a rank's memory peaks (the optimizer's state, the
// buckets). What the calls before it freed in blocks below the mmap
// threshold (server/main.cc), such as a gradient pushed in chunks, glibc
// keeps for reuse; it goes back to the system first, so that it does not
// add to that peak: in zero_step_bench the ranks' peaks above their
// parameters came out about 20 MiB lower. It costs a page fault a page
// when the next calls take that memory again, and the trim walks the
// heaps: only when they hold this much free (every arena's, as glibc's
// mallinfo2 counts it) are they trimmed, so that a small model's steps of
// a few milliseconds do not pay for it.
inline constexpr size_t kTrimHeapsHoldingFreeBytes = size_t{8} << 20;

// Trims glibc's heaps (malloc_trim) when they hold `threshold` free bytes
// or more; true if it did. Under a sanitizer's allocator, which glibc does
// not run, nothing.
bool ReturnFreedHeap(size_t threshold = kTrimHeapsHoldingFreeBytes);

}  // namespace distopt

#endif  // DISTOPT_COMMON_HEAP_TRIM_H_
