#include "common/cuda_backend.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cuda_ops.h"
#include "common/fill.h"

namespace distopt {
namespace {

absl::Status FromCuda(const std::string& error, const Device& device,
                      absl::string_view what) {
  if (error.empty()) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(device.ToString(), ": ", what, " failed: ", error));
}

// The dtype codes of cuda_ops (3, int64, is not a floating dtype).
int FloatingCode(DType dtype) {
  return dtype == DType::kFloat32    ? 0
         : dtype == DType::kFloat16  ? 1
         : dtype == DType::kBFloat16 ? 2
                                     : 3;
}

class CudaBackendImpl : public Backend {
 public:
  explicit CudaBackendImpl(int index) : device_(Device::Cuda(index)) {}

  Device device() const override { return device_; }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    void* pointer = nullptr;
    const std::string error = cuda_ops::Malloc(device_.index, bytes, &pointer);
    if (!error.empty()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          device_.ToString(), ": cannot allocate ", bytes, " bytes: ", error));
    }
    return pointer;
  }

  void Free(void* pointer) override {
    // A failure here means the context is gone; nothing is left to free.
    cuda_ops::Free(device_.index, pointer);
  }

  absl::Status CopyFromHost(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    return FromCuda(cuda_ops::CopyHostToDevice(device_.index, dst, src, bytes),
                    device_, "host-to-device copy");
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    return FromCuda(cuda_ops::CopyDeviceToHost(device_.index, dst, src, bytes),
                    device_, "device-to-host copy");
  }
  absl::Status CopyWithinDevice(void* dst, const void* src,
                                size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    return FromCuda(
        cuda_ops::CopyDeviceToDevice(device_.index, dst, src, bytes), device_,
        "device-to-device copy");
  }

  absl::Status Add(void* dst, const void* src, DType dtype,
                   size_t count) override {
    return FromCuda(
        cuda_ops::Add(device_.index, dst, src, FloatingCode(dtype), count),
        device_, "add");
  }

  absl::Status Fill(void* dst, DType dtype, size_t count,
                    double value) override {
    return FromCuda(
        cuda_ops::Fill(device_.index, dst, static_cast<int>(ElementSize(dtype)),
                       EncodeScalar(dtype, value), count),
        device_, "fill");
  }

  absl::Status Convert(void* dst, DType dst_dtype, const void* src,
                       DType src_dtype, size_t count) override {
    return FromCuda(
        cuda_ops::Convert(device_.index, dst, FloatingCode(dst_dtype), src,
                          FloatingCode(src_dtype), count),
        device_, "dtype conversion");
  }

  absl::StatusOr<void*> AllocateStaging(size_t bytes) override {
    void* pointer = nullptr;
    const std::string error = cuda_ops::MallocHost(bytes, &pointer);
    if (!error.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrCat(device_.ToString(), ": cannot allocate ", bytes,
                       " bytes of page-locked host memory: ", error));
    }
    return pointer;
  }
  void FreeStaging(void* pointer) override { cuda_ops::FreeHost(pointer); }

 private:
  const Device device_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int index) {
  const std::string name = Device::Cuda(index).ToString();
  if (!cuda_ops::BuiltWithCuda()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name,
        ": this binary was built without CUDA (no toolkit was found at build "
        "time); rebuild with the CUDA toolkit or use --device=cpu"));
  }
  int count = 0;
  const std::string error = cuda_ops::DeviceCount(&count);
  if (!error.empty() || count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": no CUDA GPU is available on this machine",
                     error.empty() ? "" : absl::StrCat(" (", error, ")"),
                     "; use --device=cpu"));
  }
  if (index >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": this machine has ", count,
                     " CUDA GPU(s); expected an index below ", count));
  }
  return std::unique_ptr<Backend>(new CudaBackendImpl(index));
}

}  // namespace distopt
