// The text a CUDA-compiled operation returns for a CUDA error: empty on
// success, "cudaErrorName: description" otherwise (the operations report
// errors as strings so that only .cu files see the CUDA headers). For .cu
// files only.
#ifndef DISTOPT_COMMON_CUDA_ERROR_TEXT_H_
#define DISTOPT_COMMON_CUDA_ERROR_TEXT_H_

#include <cuda_runtime.h>

#include <string>

namespace distopt {

inline std::string CudaErrorText(cudaError_t error) {
  if (error == cudaSuccess) return std::string();
  return std::string(cudaGetErrorName(error)) + ": " +
         cudaGetErrorString(error);
}

}  // namespace distopt

#endif  // DISTOPT_COMMON_CUDA_ERROR_TEXT_H_
