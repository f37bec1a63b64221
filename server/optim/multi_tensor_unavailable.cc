// Stands in for multi_tensor_cuda.cu when the build found no CUDA toolkit.
#include "server/optim/multi_tensor.h"

namespace distopt {
namespace multi_tensor {

std::string Run(const Launch&) {
  return "this binary was built without CUDA (no toolkit was found at build "
         "time)";
}

}  // namespace multi_tensor
}  // namespace distopt
