// Runs n calls at once, one thread each, as the ranks of a collective must
// be called (a rank's call waits for the others').
#ifndef DISTOPT_COMMON_AT_ONCE_H_
#define DISTOPT_COMMON_AT_ONCE_H_

#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace distopt {

// call(0), ..., call(n - 1), each on its own thread; their results in order.
inline std::vector<absl::Status> AtOnce(
    int n, const std::function<absl::Status(int)>& call) {
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] { results[i] = call(i); });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

}  // namespace distopt

#endif  // DISTOPT_COMMON_AT_ONCE_H_
