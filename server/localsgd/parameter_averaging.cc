#include "server/localsgd/parameter_averaging.h"

namespace distopt {
namespace {

// Averages `members` through one fp32 bucket in `storage`.
absl::Status AverageBucket(Communicator& communicator,
                           const std::vector<Tensor*>& members,
                           DeviceBuffer* storage) {
  size_t size = 0;
  for (const Tensor* p : members) size += p->num_elements();
  if (size == 0) return absl::OkStatus();
  Backend& device = storage->backend();
  absl::StatusOr<absl::Span<float>> bucket = storage->Elements<float>(size);
  // A rank that cannot take part breaks the round (communicator.h).
  if (!bucket.ok()) return AsCollectiveFailure(bucket.status());
  absl::Status converted;
  size_t offset = 0;
  for (Tensor* p : members) {
    if (converted.ok()) {
      converted = device.Convert(bucket->data() + offset, DType::kFloat32,
                                 p->data(), p->dtype(), p->num_elements());
    }
    offset += p->num_elements();
  }
  // A failed conversion still takes part, so that no peer waits for it,
  // and breaks the round: its peers averaged what the bucket held.
  absl::Status status = communicator.AllReduce(*bucket, ReduceOp::kAverage);
  if (!status.ok()) return status;
  if (!converted.ok()) return AsCollectiveFailure(converted);
  offset = 0;
  for (Tensor* p : members) {
    absl::Status narrowed =
        device.Convert(p->data(), p->dtype(), bucket->data() + offset,
                       DType::kFloat32, p->num_elements());
    if (!narrowed.ok()) return AsCollectiveFailure(narrowed);
    offset += p->num_elements();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AverageParameters(Communicator& communicator,
                               const std::vector<Tensor*>& params,
                               int64_t bucket_elements, DeviceBuffer* storage) {
  std::vector<Tensor*> pending;
  int64_t pending_size = 0;
  auto flush = [&] {
    absl::Status status = AverageBucket(communicator, pending, storage);
    pending.clear();
    pending_size = 0;
    return status;
  };
  for (Tensor* p : params) {
    const int64_t count = p->num_elements();
    if (p->dtype() == DType::kFloat32 && 2 * count > bucket_elements) {
      // Large enough to be its own message: averaged where it lies.
      absl::Status status = communicator.AllReduce(
          absl::MakeSpan(static_cast<float*>(p->data()), p->num_elements()),
          ReduceOp::kAverage);
      if (!status.ok()) return status;
      continue;
    }
    if (pending_size + count > bucket_elements && !pending.empty()) {
      absl::Status status = flush();
      if (!status.ok()) return status;
    }
    pending.push_back(p);
    pending_size += count;
  }
  return flush();
}

}  // namespace distopt
