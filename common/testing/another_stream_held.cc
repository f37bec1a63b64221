#include "common/testing/another_stream_held.h"

#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "common/testing/cuda_stream_gate.h"

namespace distopt {
namespace testing {

absl::StatusOr<bool> ReturnsWhileAnotherStreamIsHeld(
    int device, absl::Duration timeout, const std::function<void()>& work) {
  CudaStreamGate gate;
  const std::string held = gate.HoldOwnStream(device);
  if (!held.empty()) return absl::FailedPreconditionError(held);
  absl::Notification returned;
  std::thread worker([&] {
    work();
    returned.Notify();
  });
  const bool in_time = returned.WaitForNotificationWithTimeout(timeout);
  gate.Open();
  worker.join();
  return in_time;
}

}  // namespace testing
}  // namespace distopt
