#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/cuda_stream.h"
#include "common/testing/cuda_stream_gate.h"

namespace distopt {
namespace testing {
struct CudaStreamGate::State {
  std::atomic<bool> open{false};
  std::atomic<bool> passed{false};
  cudaStream_t own_stream = nullptr;
};

namespace {

// Runs on CUDA's own host thread, in stream order; calls no CUDA function.
void CUDART_CB WaitForGate(void* data) {
  auto* state = static_cast<CudaStreamGate::State*>(data);
  while (!state->open.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  state->passed.store(true);
}

}  // namespace

std::string CudaStreamGate::Hold(int device, bool own_stream) {
  if (state_ != nullptr) return "the gate already holds a stream";
  cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return CudaErrorText(error);
  auto* state = new State;
  cudaStream_t stream = CallerStream();
  if (own_stream) {
    error =
        cudaStreamCreateWithFlags(&state->own_stream, cudaStreamNonBlocking);
    stream = state->own_stream;
  }
  if (error == cudaSuccess)
    error = cudaLaunchHostFunc(stream, WaitForGate, state);
  if (error != cudaSuccess) {
    if (state->own_stream != nullptr) cudaStreamDestroy(state->own_stream);
    delete state;
    return CudaErrorText(error);
  }
  state_ = state;
  return std::string();
}

std::string CudaStreamGate::HoldOwnStream(int device) {
  return Hold(device, /*own_stream=*/true);
}

std::string CudaStreamGate::HoldCallingThreadStream(int device) {
  return Hold(device, /*own_stream=*/false);
}

void CudaStreamGate::Open() {
  if (state_ != nullptr) state_->open.store(true);
}

CudaStreamGate::~CudaStreamGate() {
  if (state_ == nullptr) return;
  Open();
  // Bounded: a stream that never reaches the gate (after a device fault,
  // say) must not hang the test binary. The state is then left to the
  // host function that may still read it.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!state_->passed.load()) {
    if (std::chrono::steady_clock::now() >= deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (state_->own_stream != nullptr) cudaStreamDestroy(state_->own_stream);
  delete state_;
}

std::string CudaStreamGate::QueueCopyToDevice(void* device_dst,
                                              const void* host, size_t bytes) {
  return CudaErrorText(cudaMemcpyAsync(device_dst, host, bytes,
                                       cudaMemcpyHostToDevice, CallerStream()));
}

}  // namespace testing
}  // namespace distopt
