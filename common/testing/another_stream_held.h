// Whether work on the GPU waits for streams it does not use: `work` runs on
// a thread of its own while a stream of a CudaStreamGate's own on `device`
// is held. Says whether `work` returned within `timeout`; the gate opens
// either way and the thread is joined, so a test that fails does not hang.
// An error holding the stream (no GPU, say) is returned as such.
#ifndef DISTOPT_COMMON_TESTING_ANOTHER_STREAM_HELD_H_
#define DISTOPT_COMMON_TESTING_ANOTHER_STREAM_HELD_H_

#include <functional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace distopt {
namespace testing {

absl::StatusOr<bool> ReturnsWhileAnotherStreamIsHeld(
    int device, absl::Duration timeout, const std::function<void()>& work);

}  // namespace testing
}  // namespace distopt

#endif  // DISTOPT_COMMON_TESTING_ANOTHER_STREAM_HELD_H_
