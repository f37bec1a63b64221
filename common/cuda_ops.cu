#include <cuda_runtime.h>

#include "common/cuda_ops.h"

namespace distopt {
namespace cuda_ops {
namespace {

std::string ErrorText(cudaError_t error) {
  if (error == cudaSuccess) return std::string();
  return std::string(cudaGetErrorName(error)) + ": " +
         cudaGetErrorString(error);
}

template <typename T>
__global__ void FillKernel(T* dst, T value, size_t count) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < count; i += stride) {
    dst[i] = value;
  }
}

template <typename T>
std::string LaunchFill(void* dst, T value, size_t count) {
  if (count == 0) return std::string();
  constexpr int kThreads = 256;
  const size_t wanted = (count + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 65535 * 8 ? wanted : 65535 * 8);
  FillKernel<T><<<blocks, kThreads>>>(static_cast<T*>(dst), value, count);
  cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) error = cudaDeviceSynchronize();
  return ErrorText(error);
}

}  // namespace

bool BuiltWithCuda() { return true; }

std::string DeviceCount(int* count) {
  *count = 0;
  return ErrorText(cudaGetDeviceCount(count));
}

std::string DeviceName(int device, std::string* name) {
  cudaDeviceProp properties;
  const cudaError_t error = cudaGetDeviceProperties(&properties, device);
  if (error == cudaSuccess) *name = properties.name;
  return ErrorText(error);
}

std::string Malloc(int device, size_t bytes, void** pointer) {
  cudaError_t error = cudaSetDevice(device);
  // cudaMalloc(0) may return null; ask for one byte so callers get a pointer.
  if (error == cudaSuccess) error = cudaMalloc(pointer, bytes == 0 ? 1 : bytes);
  return ErrorText(error);
}

std::string Free(int device, void* pointer) {
  cudaError_t error = cudaSetDevice(device);
  if (error == cudaSuccess) error = cudaFree(pointer);
  return ErrorText(error);
}

std::string CopyHostToDevice(int device, void* dst, const void* src,
                             size_t bytes) {
  cudaError_t error = cudaSetDevice(device);
  if (error == cudaSuccess) {
    error = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  }
  return ErrorText(error);
}

std::string CopyDeviceToHost(int device, void* dst, const void* src,
                             size_t bytes) {
  cudaError_t error = cudaSetDevice(device);
  if (error == cudaSuccess) {
    error = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  }
  return ErrorText(error);
}

std::string CopyDeviceToDevice(int device, void* dst, const void* src,
                               size_t bytes) {
  cudaError_t error = cudaSetDevice(device);
  if (error == cudaSuccess) {
    error = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice);
  }
  return ErrorText(error);
}

std::string Fill(int device, void* dst, int element_size, uint64_t bits,
                 size_t count) {
  const cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return ErrorText(error);
  switch (element_size) {
    case 2:
      return LaunchFill(dst, static_cast<uint16_t>(bits), count);
    case 4:
      return LaunchFill(dst, static_cast<uint32_t>(bits), count);
    case 8:
      return LaunchFill(dst, static_cast<uint64_t>(bits), count);
  }
  return "Fill: element size must be 2, 4 or 8";
}

}  // namespace cuda_ops
}  // namespace distopt
