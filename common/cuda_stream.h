// How distopt's CUDA code uses the runtime: work goes on the calling
// thread's own stream (CallerStream) and is complete when the operation
// returns, and errors come back as text (so that only the .cu files see the
// CUDA headers). For code compiled with the CUDA toolkit only.
//
// The calling thread's stream, cudaStreamPerThread, rather than the legacy
// default stream (which every blocking stream waits for, and which waits
// for them): a step's kernels on one thread do not wait for a collective in
// flight on NCCL's non-blocking stream, nor for a staging copy on another
// thread's stream, and a collective orders itself after its caller's work
// by an event on this stream (server/comm/nccl_communicator.cc).
#ifndef DISTOPT_COMMON_CUDA_STREAM_H_
#define DISTOPT_COMMON_CUDA_STREAM_H_

#include <cuda_runtime.h>

#include <string>

namespace distopt {

// Empty on success, "cudaErrorName: description" otherwise.
inline std::string CudaErrorText(cudaError_t error) {
  if (error == cudaSuccess) return std::string();
  return std::string(cudaGetErrorName(error)) + ": " +
         cudaGetErrorString(error);
}

inline cudaStream_t CallerStream() { return cudaStreamPerThread; }

// Once `queued` (the status of queuing work on the caller's stream) is a
// success, waits for that stream: the status of the work.
inline cudaError_t WaitForCallerStream(cudaError_t queued) {
  return queued == cudaSuccess ? cudaStreamSynchronize(CallerStream()) : queued;
}

#ifdef __CUDACC__
// Launches `kernel` on the caller's stream and waits for it: the status of
// the launch, then of the kernel. An error an earlier call left on this
// thread (a failed probe of a device, say) is cleared first, so that it
// does not read as this launch's.
template <typename... Params, typename... Args>
cudaError_t LaunchOnCallerStream(void (*kernel)(Params...), dim3 grid,
                                 dim3 block, Args... args) {
  cudaGetLastError();
  kernel<<<grid, block, 0, CallerStream()>>>(args...);
  return WaitForCallerStream(cudaGetLastError());
}
#endif

}  // namespace distopt

#endif  // DISTOPT_COMMON_CUDA_STREAM_H_
