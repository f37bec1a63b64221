#include "common/tensor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cpu_backend.h"

namespace distopt {

// Owned memory, returned to its backend when the last tensor lets go.
struct Tensor::Storage {
  Storage(std::shared_ptr<Backend> owner, void* memory)
      : backend(std::move(owner)), data(memory) {}
  ~Storage() { backend->Free(data); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  std::shared_ptr<Backend> backend;
  void* data;
};

Tensor::Tensor()
    : dtype_(DType::kFloat32),
      shape_({0}),
      device_(Device::Cpu()),
      num_elements_(0),
      data_(nullptr) {}

Tensor::Tensor(DType dtype, Shape shape, Device device, void* data,
               std::shared_ptr<Storage> storage)
    : dtype_(dtype),
      shape_(std::move(shape)),
      device_(device),
      num_elements_(NumElements(shape_)),
      data_(data),
      storage_(std::move(storage)) {}

absl::StatusOr<Tensor> Tensor::Allocate(std::shared_ptr<Backend> backend,
                                        DType dtype, Shape shape) {
  absl::StatusOr<int64_t> count = CheckedNumElements(shape, dtype, "shape");
  if (!count.ok()) return count.status();
  absl::StatusOr<void*> memory =
      backend->Allocate(static_cast<size_t>(*count) * ElementSize(dtype));
  if (!memory.ok()) return memory.status();
  const Device device = backend->device();
  auto storage = std::make_shared<Storage>(std::move(backend), *memory);
  return Tensor(dtype, std::move(shape), device, *memory, std::move(storage));
}

absl::StatusOr<Tensor> Tensor::AllocateHost(DType dtype, Shape shape) {
  return Allocate(CpuBackend(), dtype, std::move(shape));
}

Tensor Tensor::Borrow(void* data, DType dtype, Shape shape, Device device) {
  return Tensor(dtype, std::move(shape), device, data, nullptr);
}

absl::StatusOr<Tensor> Tensor::CloneTo(std::shared_ptr<Backend> backend) const {
  Backend* target = backend.get();
  absl::StatusOr<Tensor> copy = Allocate(std::move(backend), dtype_, shape_);
  if (!copy.ok()) return copy.status();
  absl::Status status;
  if (device_.is_cpu()) {
    status = target->CopyFromHost(copy->data(), data_, byte_size());
  } else if (target->device() == device_) {
    status = target->CopyWithinDevice(copy->data(), data_, byte_size());
  } else if (target->device().is_cpu()) {
    absl::StatusOr<std::shared_ptr<Backend>> source = GetBackend(device_);
    if (!source.ok()) return source.status();
    status = (*source)->CopyToHost(copy->data(), data_, byte_size());
  } else {
    return absl::UnimplementedError(
        absl::StrCat("copy from ", device_.ToString(), " to ",
                     target->device().ToString(), " is not supported"));
  }
  if (!status.ok()) return status;
  return copy;
}

std::string Tensor::DebugString() const {
  return absl::StrCat(DTypeName(dtype_), ShapeToString(shape_), " on ",
                      device_.ToString());
}

}  // namespace distopt
