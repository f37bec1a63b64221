#include "server/localsgd/parameter_averaging.h"

#include "common/half.h"

namespace distopt {
namespace {

// Averages `members` through one fp32 bucket in `storage`.
absl::Status AverageBucket(Communicator& communicator,
                           const std::vector<Tensor*>& members,
                           std::vector<float>* storage) {
  size_t size = 0;
  for (const Tensor* p : members) size += p->num_elements();
  if (size == 0) return absl::OkStatus();
  if (storage->size() < size) storage->resize(size);
  absl::Span<float> bucket(storage->data(), size);
  size_t offset = 0;
  for (Tensor* p : members) {
    WidenToFloat(p->dtype(), p->data(),
                 bucket.subspan(offset, p->num_elements()));
    offset += p->num_elements();
  }
  absl::Status status = communicator.AllReduce(bucket, ReduceOp::kAverage);
  if (!status.ok()) return status;
  offset = 0;
  for (Tensor* p : members) {
    NarrowFromFloat(bucket.subspan(offset, p->num_elements()), p->dtype(),
                    p->data());
    offset += p->num_elements();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AverageParameters(Communicator& communicator,
                               const std::vector<Tensor*>& params,
                               int64_t bucket_elements,
                               std::vector<float>* storage) {
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
      absl::Status status =
          communicator.AllReduce(p->host_span<float>(), ReduceOp::kAverage);
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
