#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda_ops.h"
#include "common/cuda_stream.h"

namespace distopt {
namespace cuda_ops {
namespace {

// Threads per block, and the grid of a launch over `count` elements
// (grid-stride loops take whatever is beyond the cap).
constexpr int kThreads = 256;
unsigned GridFor(size_t count) {
  const size_t wanted = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(wanted < 65535 * 8 ? wanted : 65535 * 8);
}

// Half precision adds in fp32 and rounds to nearest even.
__device__ __forceinline__ float AddElements(float a, float b) { return a + b; }
__device__ __forceinline__ long long AddElements(long long a, long long b) {
  return a + b;
}
__device__ __forceinline__ __half AddElements(__half a, __half b) {
  return __float2half_rn(__half2float(a) + __half2float(b));
}
__device__ __forceinline__ __nv_bfloat16 AddElements(__nv_bfloat16 a,
                                                     __nv_bfloat16 b) {
  return __float2bfloat16_rn(__bfloat162float(a) + __bfloat162float(b));
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
  return CudaErrorText(LaunchOnCallerStream(FillKernel<T>, GridFor(count),
                                            kThreads, static_cast<T*>(dst),
                                            value, count));
}

template <typename T>
__global__ void AddKernel(T* dst, const T* src, size_t count) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < count; i += stride) {
    dst[i] = AddElements(dst[i], src[i]);
  }
}

template <typename T>
std::string LaunchAdd(void* dst, const void* src, size_t count) {
  if (count == 0) return std::string();
  return CudaErrorText(LaunchOnCallerStream(AddKernel<T>, GridFor(count),
                                            kThreads, static_cast<T*>(dst),
                                            static_cast<const T*>(src), count));
}

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename To, typename From>
__global__ void ConvertKernel(To* dst, const From* src, size_t count) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < count; i += stride) {
    dst[i] = FromFloat<To>(ToFloat(src[i]));
  }
}

template <typename To, typename From>
std::string LaunchConvert(void* dst, const void* src, size_t count) {
  if (count == 0) return std::string();
  return CudaErrorText(LaunchOnCallerStream(
      ConvertKernel<To, From>, GridFor(count), kThreads, static_cast<To*>(dst),
      static_cast<const From*>(src), count));
}

template <typename To>
std::string ConvertTo(void* dst, const void* src, int src_dtype, size_t count) {
  switch (src_dtype) {
    case 0:
      return LaunchConvert<To, float>(dst, src, count);
    case 1:
      return LaunchConvert<To, __half>(dst, src, count);
    case 2:
      return LaunchConvert<To, __nv_bfloat16>(dst, src, count);
  }
  return "Convert: unknown source dtype";
}

}  // namespace

bool BuiltWithCuda() { return true; }

std::string Convert(int device, void* dst, int dst_dtype, const void* src,
                    int src_dtype, size_t count) {
  const cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return CudaErrorText(error);
  switch (dst_dtype) {
    case 0:
      return ConvertTo<float>(dst, src, src_dtype, count);
    case 1:
      return ConvertTo<__half>(dst, src, src_dtype, count);
    case 2:
      return ConvertTo<__nv_bfloat16>(dst, src, src_dtype, count);
  }
  return "Convert: unknown destination dtype";
}

std::string MallocHost(size_t bytes, void** pointer) {
  return CudaErrorText(cudaMallocHost(pointer, bytes == 0 ? 1 : bytes));
}

std::string FreeHost(void* pointer) {
  return CudaErrorText(cudaFreeHost(pointer));
}

std::string DeviceUuid(int device, std::string* uuid) {
  cudaDeviceProp properties;
  const cudaError_t error = cudaGetDeviceProperties(&properties, device);
  if (error != cudaSuccess) return CudaErrorText(error);
  static const char kHex[] = "0123456789abcdef";
  std::string text = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    const unsigned char byte =
        static_cast<unsigned char>(properties.uuid.bytes[i]);
    text += kHex[byte >> 4];
    text += kHex[byte & 15];
  }
  *uuid = text;
  return std::string();
}

std::string Add(int device, void* dst, const void* src, int dtype,
                size_t count) {
  const cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return CudaErrorText(error);
  switch (dtype) {
    case 0:
      return LaunchAdd<float>(dst, src, count);
    case 1:
      return LaunchAdd<__half>(dst, src, count);
    case 2:
      return LaunchAdd<__nv_bfloat16>(dst, src, count);
    case 3:
      return LaunchAdd<long long>(dst, src, count);
  }
  return "Add: unknown dtype";
}

std::string DeviceCount(int* count) {
  *count = 0;
  return CudaErrorText(cudaGetDeviceCount(count));
}

std::string DeviceName(int device, std::string* name) {
  cudaDeviceProp properties;
  const cudaError_t error = cudaGetDeviceProperties(&properties, device);
  if (error == cudaSuccess) *name = properties.name;
  return CudaErrorText(error);
}

std::string Malloc(int device, size_t bytes, void** pointer) {
  cudaError_t error = cudaSetDevice(device);
  // cudaMalloc(0) may return null; ask for one byte so callers get a pointer.
  if (error == cudaSuccess) error = cudaMalloc(pointer, bytes == 0 ? 1 : bytes);
  return CudaErrorText(error);
}

std::string Free(int device, void* pointer) {
  cudaError_t error = cudaSetDevice(device);
  if (error == cudaSuccess) error = cudaFree(pointer);
  return CudaErrorText(error);
}

std::string CopyHostToDevice(int device, void* dst, const void* src,
                             size_t bytes) {
  cudaError_t error = cudaSetDevice(device);
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                            CallerStream());
  }
  return CudaErrorText(WaitForCallerStream(error));
}

std::string CopyDeviceToHost(int device, void* dst, const void* src,
                             size_t bytes) {
  cudaError_t error = cudaSetDevice(device);
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                            CallerStream());
  }
  return CudaErrorText(WaitForCallerStream(error));
}

std::string CopyDeviceToDevice(int device, void* dst, const void* src,
                               size_t bytes) {
  cudaError_t error = cudaSetDevice(device);
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                            CallerStream());
  }
  return CudaErrorText(WaitForCallerStream(error));
}

std::string Fill(int device, void* dst, int element_size, uint64_t bits,
                 size_t count) {
  const cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return CudaErrorText(error);
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
