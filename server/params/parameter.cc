#include "server/params/parameter.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace distopt {

Parameter::Parameter(uint64_t id, std::string name, Tensor values,
                     Reservation reservation, uint64_t version)
    : id_(id),
      name_(std::move(name)),
      dtype_(values.dtype()),
      shape_(values.shape()),
      byte_size_(values.byte_size()),
      device_(values.device()),
      values_(std::move(values)),
      reservation_(std::move(reservation)),
      version_(version) {}

ParameterInfo Parameter::Info() const {
  ParameterInfo info;
  info.id = id_;
  info.name = name_;
  info.dtype = dtype_;
  info.shape = shape_;
  info.num_elements = NumElements(shape_);
  info.byte_size = static_cast<int64_t>(byte_size_);
  info.device = device_;
  absl::ReaderMutexLock lock(&mutex_);
  info.version = version_;
  return info;
}

absl::Status Parameter::ReadBytes(uint64_t expected_version, size_t offset,
                                  size_t length, void* out) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (version_ != expected_version) {
    return absl::AbortedError(absl::StrCat(
        "parameter ", id_, " (\"", name_, "\") changed while being read (",
        "version ", expected_version, " -> ", version_, "); read it again"));
  }
  return ReadBytesLocked(offset, length, out);
}

absl::Status Parameter::ReadBytesLocked(size_t offset, size_t length,
                                        void* out) const {
  // An empty parameter's values have no memory at all (memcpy from null
  // is undefined even for no bytes).
  if (length == 0) return absl::OkStatus();
  const char* source = static_cast<const char*>(values_.data()) + offset;
  if (device_.is_cpu()) {
    std::memcpy(out, source, length);
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<Backend>> backend = GetBackend(device_);
  if (!backend.ok()) return backend.status();
  return (*backend)->CopyToHost(out, source, length);
}

absl::StatusOr<uint64_t> Parameter::ReadSnapshot(void* out) const {
  absl::ReaderMutexLock lock(&mutex_);
  absl::Status status = ReadBytesLocked(0, byte_size_, out);
  if (!status.ok()) return status;
  return version_;
}

absl::StatusOr<uint64_t> Parameter::ReplaceValues(Tensor values,
                                                  Reservation reservation) {
  absl::MutexLock lock(&mutex_);
  if (deleted_) {
    return absl::NotFoundError(absl::StrCat(
        "parameter ", id_, " (\"", name_, "\") was deleted during the write"));
  }
  // The old values and reservation go out of scope with the arguments.
  std::swap(values_, values);
  std::swap(reservation_, reservation);
  return ++version_;
}

void Parameter::MarkDeleted() {
  absl::MutexLock lock(&mutex_);
  deleted_ = true;
}

}  // namespace distopt
