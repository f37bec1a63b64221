#include "common/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/fill.h"

namespace distopt {
namespace {

constexpr size_t kAlignment = 64;

class CpuBackendImpl : public Backend {
 public:
  Device device() const override { return Device::Cpu(); }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    // aligned_alloc wants a multiple of the alignment, and non-zero.
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* pointer = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment
                                                                : rounded);
    if (pointer == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cpu: cannot allocate ", bytes, " bytes"));
    }
    return pointer;
  }

  void Free(void* pointer) override { std::free(pointer); }

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

  absl::Status Fill(void* dst, DType dtype, size_t count,
                    double value) override {
    FillHost(dst, dtype, count, value);
    return absl::OkStatus();
  }
};

}  // namespace

std::shared_ptr<Backend> CpuBackend() {
  static auto* backend = new std::shared_ptr<Backend>(new CpuBackendImpl);
  return *backend;
}

}  // namespace distopt
