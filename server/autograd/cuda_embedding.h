// embedding's row gather on a GPU, behind a plain C++ interface so that
// only cuda_embedding.cu is compiled by nvcc (cuda_embedding_unavailable.cc
// stands in without a toolkit). Returns "" or the CUDA error; done on
// return.
#ifndef DISTOPT_SERVER_AUTOGRAD_CUDA_EMBEDDING_H_
#define DISTOPT_SERVER_AUTOGRAD_CUDA_EMBEDDING_H_

#include <cstdint>
#include <string>

namespace distopt {
namespace cuda_embedding {

// out[i, :] = table[indices[i], :] for i < count; `table` and `out` are
// float32 device memory on `device`, `indices` host memory (range-checked
// by the caller).
std::string Gather(int device, const float* table, const int64_t* indices,
                   int64_t count, int64_t dim, float* out);

}  // namespace cuda_embedding
}  // namespace distopt

#endif  // DISTOPT_SERVER_AUTOGRAD_CUDA_EMBEDDING_H_
