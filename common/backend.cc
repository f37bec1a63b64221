#include "common/backend.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/cpu_backend.h"
#include "common/cuda_backend.h"
#include "common/cuda_ops.h"

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

absl::StatusOr<std::string> DeviceIdentity(const Device& device) {
  if (device.is_cpu()) return std::string("cpu");
  // The backend's checks first: built with CUDA, the GPU present.
  absl::StatusOr<std::shared_ptr<Backend>> backend = GetBackend(device);
  if (!backend.ok()) return backend.status();
  std::string uuid;
  const std::string error = cuda_ops::DeviceUuid(device.index, &uuid);
  if (!error.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        device.ToString(), ": cannot read the GPU's UUID: ", error));
  }
  return uuid;
}

}  // namespace distopt
