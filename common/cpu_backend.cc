#include "common/cpu_backend.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/fill.h"
#include "common/half.h"
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

  absl::Status Convert(void* dst, DType dst_dtype, const void* src,
                       DType src_dtype, size_t count) override {
    if (count == 0) return absl::OkStatus();
    if (dst_dtype == src_dtype) {
      std::memmove(dst, src, count * ElementSize(dst_dtype));
    } else if (dst_dtype == DType::kFloat32) {
      WidenToFloat(src_dtype, src,
                   absl::MakeSpan(static_cast<float*>(dst), count));
    } else if (src_dtype == DType::kFloat32) {
      NarrowFromFloat(
          absl::MakeConstSpan(static_cast<const float*>(src), count), dst_dtype,
          dst);
    } else {
      // Between the two half formats: through fp32, one element at a time
      // (exact widening, then one rounding).
      for (size_t i = 0; i < count; ++i) {
        float value = 0;
        WidenToFloat(src_dtype,
                     static_cast<const char*>(src) + i * ElementSize(src_dtype),
                     absl::MakeSpan(&value, 1));
        NarrowFromFloat(absl::MakeConstSpan(&value, 1), dst_dtype,
                        static_cast<char*>(dst) + i * ElementSize(dst_dtype));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<void*> AllocateStaging(size_t bytes) override {
    return Allocate(bytes);
  }
  void FreeStaging(void* pointer) override { Free(pointer); }

 private:
  HostBlockCache blocks_{kMaxCachedBytes};
};

}  // namespace

std::shared_ptr<Backend> CpuBackend() {
  static auto* backend = new std::shared_ptr<Backend>(new CpuBackendImpl);
  return *backend;
}

}  // namespace distopt
