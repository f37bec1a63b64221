// Stands in for cuda_embedding.cu when the build found no CUDA toolkit.
#include "server/autograd/cuda_embedding.h"

namespace distopt {
namespace cuda_embedding {

std::string Gather(int, const float*, const int64_t*, int64_t, int64_t,
                   float*) {
  return "this binary was built without CUDA (no toolkit was found at build "
         "time)";
}

}  // namespace cuda_embedding
}  // namespace distopt
