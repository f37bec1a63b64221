#include "common/thread_pool.h"

#include <algorithm>

#include "absl/synchronization/blocking_counter.h"

namespace distopt {

ThreadPool::ThreadPool(int threads) {
  // The caller of ParallelFor works too, so one thread fewer.
  for (int i = 1; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

ThreadPool& ThreadPool::Default() {
  static auto* pool = new ThreadPool(
      std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  return *pool;
}

void ThreadPool::Run() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mutex_);
      mutex_.Await(absl::Condition(
          +[](ThreadPool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mutex_) {
            return pool->stopping_ || !pool->tasks_.empty();
          },
          this));
      if (tasks_.empty()) return;  // Stopping.
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(
    int64_t n, int64_t grain,
    const std::function<void(int64_t begin, int64_t end)>& body) {
  if (n <= 0) return;
  const int64_t parts = std::min<int64_t>(
      size(), std::max<int64_t>(1, n / std::max<int64_t>(1, grain)));
  if (parts == 1) {
    body(0, n);
    return;
  }
  const int64_t chunk = (n + parts - 1) / parts;
  absl::BlockingCounter done(static_cast<int>(parts - 1));
  {
    absl::MutexLock lock(&mutex_);
    for (int64_t p = 1; p < parts; ++p) {
      const int64_t begin = p * chunk;
      const int64_t end = std::min(n, begin + chunk);
      tasks_.push_back([&body, &done, begin, end] {
        if (begin < end) body(begin, end);
        done.DecrementCount();
      });
    }
  }
  body(0, std::min(n, chunk));
  done.Wait();
}

}  // namespace distopt
