#include "server/params/two_stage_pipeline.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace distopt {

absl::Status RunTwoStages(size_t blocks, size_t window,
                          absl::FunctionRef<absl::Status(size_t)> first,
                          absl::FunctionRef<absl::Status(size_t)> second,
                          absl::FunctionRef<bool()> meanwhile) {
  if (blocks == 1) {  // Nothing to overlap: no thread.
    absl::Status status = first(0);
    return status.ok() ? second(0) : status;
  }
  if (blocks == 0) return absl::OkStatus();
  window = std::max<size_t>(window, 1);
  std::mutex mutex;
  std::condition_variable changed;
  size_t firsts_done = 0;   // Blocks whose first stage has returned.
  size_t seconds_done = 0;  // Blocks whose second stage has returned.
  bool stop = false;        // A stage failed.
  absl::Status first_status;
  std::thread helper([&] {
    for (size_t k = 0; k < blocks; ++k) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        // k >= seconds_done here: block k's second stage waits for its first.
        changed.wait(lock, [&] { return stop || k - seconds_done < window; });
        if (stop) return;
      }
      absl::Status status = first(k);
      std::lock_guard<std::mutex> lock(mutex);
      if (!status.ok()) {
        first_status = std::move(status);
        stop = true;
      } else {
        firsts_done = k + 1;
      }
      changed.notify_all();
      if (stop) return;
    }
  });
  absl::Status status;
  for (size_t k = 0; k < blocks && status.ok(); ++k) {
    for (bool more = true; more;) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (stop || k < firsts_done) break;
      }
      more = meanwhile();
    }
    {
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return stop || k < firsts_done; });
      if (stop) {  // Only the first stage stops while this one waits.
        status = first_status;
        break;
      }
    }
    status = second(k);
    std::lock_guard<std::mutex> lock(mutex);
    if (!status.ok()) {
      stop = true;
    } else {
      seconds_done = k + 1;
    }
    changed.notify_all();
  }
  helper.join();
  return status;
}

}  // namespace distopt
