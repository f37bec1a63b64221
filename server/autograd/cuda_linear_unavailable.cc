// Stands in for cuda_linear.cu when the build found no CUDA toolkit.
#include "server/autograd/cuda_linear.h"

namespace distopt {
namespace cuda_linear {
namespace {
constexpr char kBuiltWithoutCuda[] =
    "this binary was built without CUDA (no toolkit was found at build time)";
}  // namespace

std::string Forward(int, const float*, const float*, const float*, float*,
                    int64_t, int64_t, int64_t) {
  return kBuiltWithoutCuda;
}

std::string Backward(int, const float*, const float*, const float*, float*,
                     float*, float*, int64_t, int64_t, int64_t) {
  return kBuiltWithoutCuda;
}

}  // namespace cuda_linear
}  // namespace distopt
