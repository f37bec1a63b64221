#include "common/backend.h"

#include <map>

#include "absl/synchronization/mutex.h"
#include "common/cpu_backend.h"
#include "common/cuda_backend.h"

namespace distopt {

absl::StatusOr<std::shared_ptr<Backend>> GetBackend(const Device& device) {
  if (device.is_cpu()) return CpuBackend();
  static absl::Mutex mutex;
  // Backends live for the whole process: tensors may outlive any owner.
  static auto* cuda_backends = new std::map<int, std::shared_ptr<Backend>>;
  absl::MutexLock lock(&mutex);
  auto it = cuda_backends->find(device.index);
  if (it != cuda_backends->end()) return it->second;
  absl::StatusOr<std::unique_ptr<Backend>> created =
      CreateCudaBackend(device.index);
  if (!created.ok()) return created.status();
  std::shared_ptr<Backend> backend = std::move(*created);
  cuda_backends->emplace(device.index, backend);
  return backend;
}

}  // namespace distopt
