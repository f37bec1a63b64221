// linear on a GPU with cuBLAS, behind a plain C++ interface so that only
// cuda_linear.cu is compiled by nvcc (cuda_linear_unavailable.cc stands in
// without a toolkit). All pointers are float32 row-major device memory on
// `device`; each function returns "" or the CUDA/cuBLAS error (cuBLAS that
// cannot be loaded among them, cublas_library.h) and has finished when it
// returns.
#ifndef DISTOPT_SERVER_AUTOGRAD_CUDA_LINEAR_H_
#define DISTOPT_SERVER_AUTOGRAD_CUDA_LINEAR_H_

#include <cstdint>
#include <string>

namespace distopt {
namespace cuda_linear {

// y[n, out] = x[n, in] w[out, in]^T + b[out]; b may be null.
std::string Forward(int device, const float* x, const float* w, const float* b,
                    float* y, int64_t n, int64_t in, int64_t out);

// dx = dy w; dw = dy^T x; db = column sums of dy (skipped when null).
std::string Backward(int device, const float* dy, const float* x,
                     const float* w, float* dx, float* dw, float* db, int64_t n,
                     int64_t in, int64_t out);

}  // namespace cuda_linear
}  // namespace distopt

#endif  // DISTOPT_SERVER_AUTOGRAD_CUDA_LINEAR_H_
