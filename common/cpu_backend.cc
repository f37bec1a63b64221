#include "common/cpu_backend.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/fill.h"
#include "common/host_block_cache.h"

namespace distopt {
namespace {

// Freed large blocks kept for reuse, at most this many bytes.
constexpr size_t kMaxCachedBytes = size_t{2} << 30;

class CpuBackendImpl : public Backend {
 public:
  Device device() const override { return Device::Cpu(); }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    void* pointer = blocks_.Allocate(bytes);
    if (pointer == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cpu: cannot allocate ", bytes, " bytes"));
    }
    return pointer;
  }

  void Free(void* pointer) override { blocks_.Free(pointer); }

  absl::Status CopyFromHost(void* dst, const void* src, size_t bytes) override {
    if (bytes != 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes != 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyWithinDevice(void* dst, const void* src,
                                size_t bytes) override {
    if (bytes != 0) std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }

  absl::Status Add(void* dst, const void* src, DType dtype,
                   size_t count) override {
    AddHost(dst, src, dtype, count);
    return absl::OkStatus();
  }

  absl::Status Fill(void* dst, DType dtype, size_t count,
                    double value) override {
    FillHost(dst, dtype, count, value);
    return absl::OkStatus();
  }

 private:
  HostBlockCache blocks_{kMaxCachedBytes};
};

}  // namespace

std::shared_ptr<Backend> CpuBackend() {
  static auto* backend = new std::shared_ptr<Backend>(new CpuBackendImpl);
  return *backend;
}

}  // namespace distopt
