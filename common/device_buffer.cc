#include "common/device_buffer.h"

namespace distopt {

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this == &other) return *this;
  Release();
  backend_ = std::move(other.backend_);
  kind_ = other.kind_;
  data_ = other.data_;
  capacity_ = other.capacity_;
  other.data_ = nullptr;
  other.capacity_ = 0;
  return *this;
}

absl::StatusOr<char*> DeviceBuffer::Reserve(size_t bytes) {
  if (data_ != nullptr && capacity_ >= bytes) return data_;
  Release();
  absl::StatusOr<void*> memory = kind_ == Kind::kStaging
                                     ? backend_->AllocateStaging(bytes)
                                     : backend_->Allocate(bytes);
  if (!memory.ok()) return memory.status();
  data_ = static_cast<char*>(*memory);
  capacity_ = bytes;
  return data_;
}

void DeviceBuffer::Release() {
  if (data_ == nullptr) return;
  if (kind_ == Kind::kStaging) {
    backend_->FreeStaging(data_);
  } else {
    backend_->Free(data_);
  }
  data_ = nullptr;
  capacity_ = 0;
}

}  // namespace distopt
