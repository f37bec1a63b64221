// ThreadPool: a fixed set of threads for splitting elementwise work.
//
// ParallelFor cuts [0, n) into contiguous ranges of at least `grain`
// elements, runs them on the pool (and on the calling thread) and returns
// when all are done. Thread-safe; ParallelFor must not be called from inside
// a ParallelFor body.
#ifndef DISTOPT_COMMON_THREAD_POOL_H_
#define DISTOPT_COMMON_THREAD_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace distopt {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process's pool, with one thread per core.
  static ThreadPool& Default();

  void ParallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t begin, int64_t end)>& body)
      ABSL_LOCKS_EXCLUDED(mutex_);

  int size() const { return static_cast<int>(threads_.size()) + 1; }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mutex_);

  absl::Mutex mutex_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace distopt

#endif  // DISTOPT_COMMON_THREAD_POOL_H_
