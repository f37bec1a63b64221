// cuBLAS is column-major: a row-major [r, c] matrix is its column-major
// [c, r] transpose, so y = x w^T is computed as y^T = w x^T, and so on.
// cuBLAS itself is opened on first use (cublas_library.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <mutex>

#include "common/cuda_stream.h"
#include "server/autograd/cublas_library.h"
#include "server/autograd/cuda_linear.h"

namespace distopt {
namespace cuda_linear {
namespace {

std::string BlasError(cublasStatus_t status) {
  if (status == CUBLAS_STATUS_SUCCESS) return std::string();
  return "cuBLAS error " + std::to_string(static_cast<int>(status));
}

// cuBLAS and one handle per device, made on first use and kept.
std::string Handle(int device, const CublasLibrary** blas,
                   cublasHandle_t* handle) {
  absl::StatusOr<const CublasLibrary*> library = LoadCublas();
  if (!library.ok()) return std::string(library.status().message());
  static std::mutex mutex;
  static cublasHandle_t handles[64] = {};
  std::lock_guard<std::mutex> lock(mutex);
  cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return CudaErrorText(error);
  cublasHandle_t& slot = handles[device % 64];
  if (slot == nullptr) {
    const std::string made = BlasError((*library)->create(&slot));
    if (!made.empty()) return made;
  }
  *blas = *library;
  *handle = slot;
  return std::string();
}

__global__ void AddBias(float* y, const float* b, int64_t n, int64_t out) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n * out; i += stride) {
    y[i] += b[i % out];
  }
}

__global__ void ColumnSums(const float* dy, float* db, int64_t n, int64_t out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= out) return;
  float sum = 0;
  for (int64_t r = 0; r < n; ++r) sum += dy[r * out + c];
  db[c] = sum;
}

int Blocks(int64_t count, int threads) {
  const int64_t wanted = (count + threads - 1) / threads;
  return static_cast<int>(wanted < 65535 * 8 ? (wanted > 0 ? wanted : 1)
                                             : 65535 * 8);
}

}  // namespace

std::string Forward(int device, const float* x, const float* w, const float* b,
                    float* y, int64_t n, int64_t in, int64_t out) {
  const CublasLibrary* blas;
  cublasHandle_t handle;
  std::string error = Handle(device, &blas, &handle);
  if (!error.empty()) return error;
  const float one = 1.0f;
  const float zero = 0.0f;
  error = BlasError(blas->sgemm(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
      static_cast<int>(n), static_cast<int>(in), &one, w, static_cast<int>(in),
      x, static_cast<int>(in), &zero, y, static_cast<int>(out)));
  if (!error.empty()) return error;
  if (b != nullptr && n * out > 0) {
    AddBias<<<Blocks(n * out, 256), 256>>>(y, b, n, out);
  }
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) status = cudaDeviceSynchronize();
  return CudaErrorText(status);
}

std::string Backward(int device, const float* dy, const float* x,
                     const float* w, float* dx, float* dw, float* db, int64_t n,
                     int64_t in, int64_t out) {
  const CublasLibrary* blas;
  cublasHandle_t handle;
  std::string error = Handle(device, &blas, &handle);
  if (!error.empty()) return error;
  const float one = 1.0f;
  const float zero = 0.0f;
  // dx^T [in, n] = w^T [in, out] dy^T [out, n].
  error = BlasError(blas->sgemm(
      handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(in),
      static_cast<int>(n), static_cast<int>(out), &one, w, static_cast<int>(in),
      dy, static_cast<int>(out), &zero, dx, static_cast<int>(in)));
  if (!error.empty()) return error;
  // dw^T [in, out] = x^T [in, n] dy [n, out].
  error = BlasError(blas->sgemm(
      handle, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(in),
      static_cast<int>(out), static_cast<int>(n), &one, x, static_cast<int>(in),
      dy, static_cast<int>(out), &zero, dw, static_cast<int>(in)));
  if (!error.empty()) return error;
  if (db != nullptr && out > 0) {
    ColumnSums<<<Blocks(out, 128), 128>>>(dy, db, n, out);
  }
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) status = cudaDeviceSynchronize();
  return CudaErrorText(status);
}

}  // namespace cuda_linear
}  // namespace distopt
