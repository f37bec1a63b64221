#include <cuda_runtime.h>

#include "common/cuda_stream.h"
#include "server/autograd/cuda_embedding.h"

namespace distopt {
namespace cuda_embedding {
namespace {

__global__ void GatherRows(const float* table, const int64_t* indices,
                           int64_t count, int64_t dim, float* out) {
  const int64_t total = count * dim;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += stride) {
    out[i] = table[indices[i / dim] * dim + i % dim];
  }
}

}  // namespace

std::string Gather(int device, const float* table, const int64_t* indices,
                   int64_t count, int64_t dim, float* out) {
  if (count == 0 || dim == 0) return std::string();
  cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return CudaErrorText(error);
  int64_t* device_indices = nullptr;
  error = cudaMalloc(&device_indices, count * sizeof(int64_t));
  if (error != cudaSuccess) return CudaErrorText(error);
  error = cudaMemcpy(device_indices, indices, count * sizeof(int64_t),
                     cudaMemcpyHostToDevice);
  if (error == cudaSuccess) {
    const int64_t wanted = (count * dim + 255) / 256;
    const int blocks =
        static_cast<int>(wanted < 65535 * 8 ? wanted : 65535 * 8);
    GatherRows<<<blocks, 256>>>(table, device_indices, count, dim, out);
    error = cudaGetLastError();
    if (error == cudaSuccess) error = cudaDeviceSynchronize();
  }
  cudaFree(device_indices);
  return CudaErrorText(error);
}

}  // namespace cuda_embedding
}  // namespace distopt
