// HostBackend: a Backend for tests that does everything in host memory
// through the CPU backend, and that a test subclasses to watch, slow down
// or fail one operation, or to call its memory another device's.
#ifndef DISTOPT_COMMON_TESTING_HOST_BACKEND_H_
#define DISTOPT_COMMON_TESTING_HOST_BACKEND_H_

#include <memory>

#include "common/backend.h"
#include "common/cpu_backend.h"

namespace distopt {

class HostBackend : public Backend {
 public:
  Device device() const override { return Device::Cpu(); }
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    return cpu_->Allocate(bytes);
  }
  void Free(void* pointer) override { cpu_->Free(pointer); }
  absl::Status CopyFromHost(void* dst, const void* src, size_t bytes) override {
    return cpu_->CopyFromHost(dst, src, bytes);
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    return cpu_->CopyToHost(dst, src, bytes);
  }
  absl::Status CopyWithinDevice(void* dst, const void* src,
                                size_t bytes) override {
    return cpu_->CopyWithinDevice(dst, src, bytes);
  }
  absl::Status Add(void* dst, const void* src, DType dtype,
                   size_t count) override {
    return cpu_->Add(dst, src, dtype, count);
  }
  absl::Status Fill(void* dst, DType dtype, size_t count,
                    double value) override {
    return cpu_->Fill(dst, dtype, count, value);
  }
  absl::Status Convert(void* dst, DType dst_dtype, const void* src,
                       DType src_dtype, size_t count) override {
    return cpu_->Convert(dst, dst_dtype, src, src_dtype, count);
  }
  absl::StatusOr<void*> AllocateStaging(size_t bytes) override {
    return cpu_->AllocateStaging(bytes);
  }
  void FreeStaging(void* pointer) override { cpu_->FreeStaging(pointer); }

 private:
  const std::shared_ptr<Backend> cpu_ = CpuBackend();
};

}  // namespace distopt

#endif  // DISTOPT_COMMON_TESTING_HOST_BACKEND_H_
