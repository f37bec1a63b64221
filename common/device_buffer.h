// DeviceBuffer: scratch memory on one backend's device (or, for staging,
// in host memory that device copies to fastest) that grows to the largest
// size asked of it and is kept from call to call: a fresh buffer every
// step would pay its allocation (and, in host memory, its page faults)
// every step. Its contents do not survive growing. Not thread-safe;
// move-only.
#ifndef DISTOPT_COMMON_DEVICE_BUFFER_H_
#define DISTOPT_COMMON_DEVICE_BUFFER_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/backend.h"

namespace distopt {

class DeviceBuffer {
 public:
  enum class Kind { kDevice, kStaging };

  explicit DeviceBuffer(std::shared_ptr<Backend> backend,
                        Kind kind = Kind::kDevice)
      : backend_(std::move(backend)), kind_(kind) {}
  ~DeviceBuffer() { Release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // At least `bytes` bytes; RESOURCE_EXHAUSTED when the device has no room.
  absl::StatusOr<char*> Reserve(size_t bytes);
  // `count` elements of T.
  template <typename T>
  absl::StatusOr<absl::Span<T>> Elements(size_t count) {
    absl::StatusOr<char*> bytes = Reserve(count * sizeof(T));
    if (!bytes.ok()) return bytes.status();
    return absl::Span<T>(reinterpret_cast<T*>(*bytes), count);
  }

  // Gives the memory back.
  void Release();

  Backend& backend() const { return *backend_; }
  size_t capacity() const { return capacity_; }

 private:
  std::shared_ptr<Backend> backend_;
  Kind kind_ = Kind::kDevice;
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace distopt

#endif  // DISTOPT_COMMON_DEVICE_BUFFER_H_
