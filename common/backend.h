// A device backend: memory and data movement on one device.
//
// The CPU backend works everywhere. The CUDA backend exists when the binary
// was built with the CUDA toolkit; CreateBackend() reports a clear error when
// it was not, or when no such GPU is present. Backends are shared by every
// tensor on their device and are safe to use from several threads.
#ifndef DISTOPT_COMMON_BACKEND_H_
#define DISTOPT_COMMON_BACKEND_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/device.h"
#include "common/dtype.h"

namespace distopt {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;

  // Allocates `bytes` bytes (64-byte aligned); RESOURCE_EXHAUSTED when the
  // device has no room. Allocating 0 bytes returns a valid pointer.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* pointer) = 0;

  // Copies between host memory and this device; both complete before return.
  virtual absl::Status CopyFromHost(void* device_dst, const void* host_src,
                                    size_t bytes) = 0;
  virtual absl::Status CopyToHost(void* host_dst, const void* device_src,
                                  size_t bytes) = 0;
  virtual absl::Status CopyWithinDevice(void* dst, const void* src,
                                        size_t bytes) = 0;

  // dst += src for `count` floating-point elements of `dtype`, both on this
  // device; half precision is added in fp32 and rounded to nearest even.
  virtual absl::Status Add(void* dst, const void* src, DType dtype,
                           size_t count) = 0;

  // Sets `count` elements of `dtype` at `dst` to `value` (converted to dtype
  // with round-to-nearest-even).
  virtual absl::Status Fill(void* dst, DType dtype, size_t count,
                            double value) = 0;

  // dst = src for `count` elements of floating dtypes (float32, float16,
  // bfloat16), converting from `src_dtype` to `dst_dtype`, both on this
  // device: widening is exact, narrowing rounds to nearest even (NaN stays
  // NaN), as common/half.h does.
  virtual absl::Status Convert(void* dst, DType dst_dtype, const void* src,
                               DType src_dtype, size_t count) = 0;

  // Host memory that copies to and from this device reach fastest (page-
  // locked for a GPU; ordinary for the CPU), for staging collectives that
  // run on the host. Freed with FreeStaging.
  virtual absl::StatusOr<void*> AllocateStaging(size_t bytes) = 0;
  virtual void FreeStaging(void* pointer) = 0;
};

// What tells devices apart across processes: "cpu" for host memory, the
// GPU's UUID for a CUDA device (two ranks on one host with the same one
// share that GPU). FAILED_PRECONDITION as GetBackend.
absl::StatusOr<std::string> DeviceIdentity(const Device& device);

// The backend of `device`, created on first use and then shared. Errors:
// FAILED_PRECONDITION when the binary was built without CUDA or the GPU is
// absent, naming the device.
absl::StatusOr<std::shared_ptr<Backend>> GetBackend(const Device& device);

}  // namespace distopt

#endif  // DISTOPT_COMMON_BACKEND_H_
