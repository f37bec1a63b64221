// Parameter: one named tensor owned by the daemon.
//
// The values are guarded by a reader-writer lock: readers (reads, forward
// and backward passes) share it, writers (writes, optimizer steps) hold it
// alone, so nobody sees a half-updated parameter. `version` counts
// changes of the values. Shared by shared_ptr, so a reader in flight keeps a
// deleted parameter alive until it is done.
#ifndef DISTOPT_SERVER_PARAMS_PARAMETER_H_
#define DISTOPT_SERVER_PARAMS_PARAMETER_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/device.h"
#include "common/dtype.h"
#include "common/memory_budget.h"
#include "common/parameter_info.h"
#include "common/shape.h"
#include "common/tensor.h"

namespace distopt {

class Parameter {
 public:
  // `version` is 1 for a new parameter; a restored one keeps its own.
  Parameter(uint64_t id, std::string name, Tensor values,
            Reservation reservation, uint64_t version = 1);
  Parameter(const Parameter&) = delete;
  Parameter& operator=(const Parameter&) = delete;

  uint64_t id() const { return id_; }
  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  size_t byte_size() const { return byte_size_; }

  ParameterInfo Info() const ABSL_LOCKS_EXCLUDED(mutex_);

  // Copies bytes [offset, offset + length) to host memory at `out`, which
  // the caller has checked to be in range. ABORTED when the values no longer
  // have `expected_version` (they changed since the caller began reading).
  absl::Status ReadBytes(uint64_t expected_version, size_t offset,
                         size_t length, void* out) const
      ABSL_LOCKS_EXCLUDED(mutex_);

  // Copies all the values to host memory at `out` (byte_size() bytes) as
  // one consistent snapshot; returns the version they have.
  absl::StatusOr<uint64_t> ReadSnapshot(void* out) const
      ABSL_LOCKS_EXCLUDED(mutex_);

  // Replaces the values with `values` (same dtype and shape, on the same
  // device) and their reservation; the old ones are released. Returns the
  // new version. NOT_FOUND once the parameter was deleted.
  absl::StatusOr<uint64_t> ReplaceValues(Tensor values, Reservation reservation)
      ABSL_LOCKS_EXCLUDED(mutex_);

  // Marks the parameter deleted: later replacements fail.
  void MarkDeleted() ABSL_LOCKS_EXCLUDED(mutex_);

  // For optimizer steps, which update several parameters at once under
  // their locks (ParameterUpdate in parameter_update.h): change
  // values_locked() in place, then BumpVersionLocked().
  absl::Mutex& mutex() const ABSL_LOCK_RETURNED(mutex_) { return mutex_; }
  Tensor& values_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return values_;
  }
  void BumpVersionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { ++version_; }
  bool deleted_locked() const ABSL_SHARED_LOCKS_REQUIRED(mutex_) {
    return deleted_;
  }
  // For forward passes, which hold mutex() shared.
  const Tensor& values_shared_locked() const
      ABSL_SHARED_LOCKS_REQUIRED(mutex_) {
    return values_;
  }
  uint64_t version_locked() const ABSL_SHARED_LOCKS_REQUIRED(mutex_) {
    return version_;
  }

 private:
  absl::Status ReadBytesLocked(size_t offset, size_t length, void* out) const
      ABSL_SHARED_LOCKS_REQUIRED(mutex_);

  const uint64_t id_;
  const std::string name_;
  const DType dtype_;
  const Shape shape_;
  const size_t byte_size_;
  const Device device_;

  mutable absl::Mutex mutex_;
  Tensor values_ ABSL_GUARDED_BY(mutex_);
  Reservation reservation_ ABSL_GUARDED_BY(mutex_);
  uint64_t version_ ABSL_GUARDED_BY(mutex_);
  bool deleted_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_PARAMS_PARAMETER_H_
