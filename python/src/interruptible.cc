#include "python/src/interruptible.h"

#include <unistd.h>

#include <deque>
#include <stdexcept>
#include <thread>

namespace distopt {
namespace python {
namespace {

// Helper threads that wait for work; a new one starts when none is idle
// (an abandoned call keeps its thread until its deadline).
class HelperThreads {
 public:
  void Run(std::function<void()> work) {
    std::unique_lock<std::mutex> lock(mutex_);
    queue_.push_back(std::move(work));
    // Each waiting thread takes one queued call.
    if (idle_ >= queue_.size()) {
      wake_.notify_one();
      return;
    }
    std::thread([this] { Serve(); }).detach();
  }

 private:
  void Serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      if (queue_.empty()) {
        // The main thread's calls often come back to back: stay awake a
        // moment (yielding) before sleeping, so that the next one needs no
        // wake-up. Short, so that a trainer's own work between calls keeps
        // its cores.
        ++idle_;
        const auto spin_until =
            std::chrono::steady_clock::now() + std::chrono::microseconds(200);
        while (queue_.empty() &&
               std::chrono::steady_clock::now() < spin_until) {
          lock.unlock();
          std::this_thread::yield();
          lock.lock();
        }
        wake_.wait(lock, [&] { return !queue_.empty(); });
        --idle_;
      }
      std::function<void()> work = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      work();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  size_t idle_ = 0;
};

}  // namespace

void RunOnHelperThread(std::function<void()> work) {
  // Never destroyed: detached helpers may outlive static destruction.
  static auto* threads = new HelperThreads;
  threads->Run(std::move(work));
}

namespace {
unsigned long main_thread_ident = 0;  // Set once, at import.
pid_t importing_process = 0;          // Likewise.
}  // namespace

void RefuseAfterFork() {
  if (getpid() != importing_process) {
    throw std::runtime_error(
        "distopt: this process was forked from the one that imported "
        "distopt, and gRPC does not survive fork; expected "
        "multiprocessing's 'spawn' (or 'forkserver') start method");
  }
}

void RememberMainThread() {
  importing_process = getpid();
  main_thread_ident = pybind11::module_::import("threading")
                          .attr("main_thread")()
                          .attr("ident")
                          .cast<unsigned long>();
}

bool OnMainThread() { return PyThread_get_thread_ident() == main_thread_ident; }

}  // namespace python
}  // namespace distopt
