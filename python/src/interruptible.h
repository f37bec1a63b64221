// Blocking calls that Ctrl-C interrupts. Python runs signal handlers only
// on the main thread, between bytecodes: a call blocked in C++ would sit
// out its whole deadline (for a data-parallel step or Join, the group's
// timeout, or a day) before KeyboardInterrupt. From the main thread the
// call therefore runs on a helper thread while the main thread waits,
// running Python's signal handlers every 20 ms; when one raises, the
// exception propagates at once and the abandoned call finishes in the
// background (its deadline bounds it), keeping the Python objects whose
// memory it borrows alive until then. From other threads the call runs in
// place: they get no signals.
#ifndef DISTOPT_PYTHON_SRC_INTERRUPTIBLE_H_
#define DISTOPT_PYTHON_SRC_INTERRUPTIBLE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "pybind11/pybind11.h"

namespace distopt {
namespace python {

// Runs `work` on a helper thread (one that is idle, or a new one).
void RunOnHelperThread(std::function<void()> work);

// Notes which thread runs Python's signal handlers (at import; the GIL
// held).
void RememberMainThread();
// True on that thread.
bool OnMainThread();
// Raises RuntimeError in a process forked after the module was imported:
// gRPC's threads and channels do not survive fork, and a call would hang.
void RefuseAfterFork();

namespace internal {

// A call handed to a helper thread, and what it returned.
template <typename Result>
struct HandedOverCall {
  std::function<Result()> call;
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::atomic<bool> finished_flag{false};  // `done`, readable without the lock.
  bool abandoned = false;
  std::optional<Result> result;
  std::exception_ptr error;
  pybind11::object borrowed;  // Released under the GIL.

  void Run() {
    std::optional<Result> value;
    std::exception_ptr caught;
    try {
      value.emplace(call());
    } catch (...) {
      caught = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mutex);
    result = std::move(value);
    error = caught;
    done = true;
    finished_flag.store(true, std::memory_order_release);
    if (abandoned) {
      lock.unlock();
      // Nobody waits: drop the borrowed objects here, with the GIL (unless
      // the interpreter is gone, when they are left as they are).
      if (Py_IsInitialized() && !_Py_IsFinalizing()) {
        pybind11::gil_scoped_acquire gil;
        borrowed = pybind11::object();
      } else {
        borrowed.release();
      }
      return;
    }
    finished.notify_one();
  }
};

}  // namespace internal

// Runs `call` without the GIL, interruptibly from the main thread (see the
// file comment). `borrowed`: the Python objects whose memory `call` reads.
// The GIL must be held.
template <typename Result>
Result RunInterruptibly(std::function<Result()> call,
                        pybind11::object borrowed = pybind11::none()) {
  RefuseAfterFork();
  if (!OnMainThread()) {
    pybind11::gil_scoped_release release;
    return call();
  }
  auto handed = std::make_shared<internal::HandedOverCall<Result>>();
  handed->call = std::move(call);
  handed->borrowed = std::move(borrowed);
  {
    pybind11::gil_scoped_release release;
    RunOnHelperThread([handed] { handed->Run(); });
    // Many calls take a fraction of a millisecond: yield rather than sleep
    // for a moment, so that a quick one costs no wake-up. Short, so that
    // the workers on this machine keep its cores during a long call.
    const auto spin_until =
        std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    while (!handed->finished_flag.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    }
  }
  while (true) {
    bool done = false;
    {
      pybind11::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(handed->mutex);
      done = handed->finished.wait_for(lock, std::chrono::milliseconds(20),
                                       [&] { return handed->done; });
    }
    if (done) break;
    if (PyErr_CheckSignals() != 0) {
      std::unique_lock<std::mutex> lock(handed->mutex);
      if (!handed->done) {
        handed->abandoned = true;
        throw pybind11::error_already_set();
      }
      // It finished meanwhile: its effect stands, and the signal's
      // exception still propagates rather than being lost.
      throw pybind11::error_already_set();
    }
  }
  handed->borrowed = pybind11::object();
  if (handed->error) std::rethrow_exception(handed->error);
  return *std::move(handed->result);
}

// RunInterruptibly for a callable: Blocking([=] { return ...; }, self).
// `call` must capture by value: an abandoned call outlives this frame.
template <typename Call>
auto Blocking(Call call, pybind11::object borrowed = pybind11::none())
    -> decltype(call()) {
  return RunInterruptibly<decltype(call())>(std::move(call),
                                            std::move(borrowed));
}

}  // namespace python
}  // namespace distopt

#endif  // DISTOPT_PYTHON_SRC_INTERRUPTIBLE_H_
