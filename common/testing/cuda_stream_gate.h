// Holds a CUDA stream at a point until the test opens the gate: a host
// function queued on the stream waits for it. The GPU tests use it to show
// what an operation waits for (the device, or only its own stream) and
// that a collective is ordered after work its caller queued.
//
// Functions return an empty string on success and the CUDA error text
// otherwise; without CUDA in the build every one fails.
#ifndef DISTOPT_COMMON_TESTING_CUDA_STREAM_GATE_H_
#define DISTOPT_COMMON_TESTING_CUDA_STREAM_GATE_H_

#include <cstddef>
#include <string>

namespace distopt {
namespace testing {

class CudaStreamGate {
 public:
  CudaStreamGate() = default;
  CudaStreamGate(const CudaStreamGate&) = delete;
  CudaStreamGate& operator=(const CudaStreamGate&) = delete;
  // Opens the gate and waits for the held stream to pass it.
  ~CudaStreamGate();

  // Holds a non-blocking stream of the gate's own on `device`: work on no
  // other stream waits for it, but a device-wide synchronisation does.
  std::string HoldOwnStream(int device);
  // Holds the calling thread's stream (cudaStreamPerThread) on `device`:
  // what the thread queues after this runs once the gate opens.
  std::string HoldCallingThreadStream(int device);
  void Open();

  // Queues on the calling thread's stream a copy of `bytes` from page-
  // locked `host` memory to `device_dst`, and returns without waiting.
  static std::string QueueCopyToDevice(void* device_dst, const void* host,
                                       size_t bytes);

  // What the host function queued on the stream shares with the gate.
  struct State;

 private:
  std::string Hold(int device, bool own_stream);

  State* state_ = nullptr;
};

}  // namespace testing
}  // namespace distopt

#endif  // DISTOPT_COMMON_TESTING_CUDA_STREAM_GATE_H_
