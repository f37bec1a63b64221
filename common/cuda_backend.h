// The CUDA backend for one GPU.
#ifndef DISTOPT_COMMON_CUDA_BACKEND_H_
#define DISTOPT_COMMON_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/backend.h"

namespace distopt {

// A backend for GPU `index`. FAILED_PRECONDITION, with the reason, when the
// binary was built without CUDA, no GPU is visible, or `index` is out of
// range. Use GetBackend() to share one instance per device.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int index);

}  // namespace distopt

#endif  // DISTOPT_COMMON_CUDA_BACKEND_H_
