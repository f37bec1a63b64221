// Tensor: a dense, row-major array of one dtype on one device.
//
// A tensor either owns its storage (allocated from a Backend and freed when
// the last tensor sharing it goes away) or borrows memory that someone else
// owns and keeps alive. Copying a Tensor shares the storage, as torch does;
// use Clone() for a deep copy. A Tensor is not synchronised: readers and
// writers of the same storage must be ordered by the caller.
#ifndef DISTOPT_COMMON_TENSOR_H_
#define DISTOPT_COMMON_TENSOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/backend.h"
#include "common/device.h"
#include "common/dtype.h"
#include "common/shape.h"

namespace distopt {

class Tensor {
 public:
  // An empty float32 0-element tensor on the CPU.
  Tensor();

  // Allocates an uninitialised tensor on `backend`'s device. Validates the
  // shape (INVALID_ARGUMENT naming "shape").
  static absl::StatusOr<Tensor> Allocate(std::shared_ptr<Backend> backend,
                                         DType dtype, Shape shape);
  // Same, in host memory.
  static absl::StatusOr<Tensor> AllocateHost(DType dtype, Shape shape);

  // Wraps memory owned elsewhere; `data` must stay valid while any copy of
  // the returned tensor is used. The shape must be valid.
  static Tensor Borrow(void* data, DType dtype, Shape shape, Device device);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Device& device() const { return device_; }
  int64_t num_elements() const { return num_elements_; }
  size_t byte_size() const { return num_elements_ * ElementSize(dtype_); }
  bool owns_storage() const { return storage_ != nullptr; }

  void* data() { return data_; }
  const void* data() const { return data_; }

  // Typed host views; the caller makes sure the dtype and device fit.
  template <typename T>
  absl::Span<T> host_span() {
    return absl::Span<T>(static_cast<T*>(data_), num_elements_);
  }
  template <typename T>
  absl::Span<const T> host_span() const {
    return absl::Span<const T>(static_cast<const T*>(data_), num_elements_);
  }

  // A new tensor with its own storage on `backend`, holding a copy.
  absl::StatusOr<Tensor> CloneTo(std::shared_ptr<Backend> backend) const;

  // "float32[2, 3] on cpu".
  std::string DebugString() const;

 private:
  struct Storage;

  Tensor(DType dtype, Shape shape, Device device, void* data,
         std::shared_ptr<Storage> storage);

  DType dtype_;
  Shape shape_;
  Device device_;
  int64_t num_elements_;
  void* data_;
  std::shared_ptr<Storage> storage_;  // Null when borrowed.
};

}  // namespace distopt

#endif  // DISTOPT_COMMON_TENSOR_H_
