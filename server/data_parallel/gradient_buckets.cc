#include "server/data_parallel/gradient_buckets.h"

#include <algorithm>
#include <deque>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"

namespace distopt {

std::vector<GradientBucket> PlanGradientBuckets(
    const std::vector<ParamGroup>& groups,
    const std::vector<std::vector<int>>& owner, int owners,
    const Presence& present, int64_t bucket_elements) {
  // Each owner's present parameters, in group and index order.
  std::vector<std::deque<BucketEntry>> waiting(owners);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      if (!present[g][i]) continue;
      BucketEntry entry;
      entry.group = static_cast<int>(g);
      entry.index = static_cast<int>(i);
      entry.owner = owner[g][i];
      entry.count = groups[g].params[i]->num_elements();
      waiting[entry.owner].push_back(entry);
    }
  }
  // Every owner gets about an equal share of each bucket.
  const int64_t share = std::max<int64_t>(1, bucket_elements / owners);
  std::vector<GradientBucket> plan;
  auto pending = [&] {
    return absl::c_any_of(waiting, [](const auto& q) { return !q.empty(); });
  };
  while (pending()) {
    GradientBucket bucket;
    bucket.blocks.assign(owners, 0);
    // Owners take turns coming first, so that none always waits for room.
    std::vector<std::vector<BucketEntry>> chosen(owners);
    int64_t size = 0;
    const int first = static_cast<int>(plan.size() % owners);
    for (int turn = 0; turn < owners; ++turn) {
      const int r = (first + turn) % owners;
      int64_t taken = 0;
      // Up to an owner's share (or one parameter larger than it), as long
      // as the bucket has room; a parameter larger than a bucket goes
      // alone.
      while (!waiting[r].empty()) {
        const int64_t count = waiting[r].front().count;
        const bool fits_share = taken == 0 || taken + count <= share;
        const bool fits_bucket = size == 0 || size + count <= bucket_elements;
        if (!fits_share || !fits_bucket) break;
        chosen[r].push_back(waiting[r].front());
        waiting[r].pop_front();
        taken += count;
        size += count;
      }
      bucket.blocks[r] = static_cast<size_t>(taken);
    }
    // Laid out in rank order: block r is owner r's.
    for (int r = 0; r < owners; ++r) {
      for (BucketEntry& entry : chosen[r]) {
        entry.offset = bucket.size;
        bucket.size += entry.count;
        bucket.entries.push_back(entry);
      }
    }
    plan.push_back(std::move(bucket));
  }
  return plan;
}

int64_t LargestBucket(const std::vector<GradientBucket>& plan) {
  int64_t largest = 0;
  for (const GradientBucket& bucket : plan) {
    largest = std::max(largest, bucket.size);
  }
  return largest;
}

absl::Status FillBucket(const GradientBucket& bucket,
                        const GroupGradientPointers& grads,
                        absl::Span<float> values, Backend& device) {
  for (const BucketEntry& entry : bucket.entries) {
    float* out = values.data() + entry.offset;
    const Tensor* grad = grads[entry.group][entry.index];
    if (grad != nullptr && grad->device() != device.device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grads[", entry.group, "][", entry.index, "]: ", grad->DebugString(),
          "; expected a gradient on ", device.device().ToString()));
    }
    absl::Status status =
        grad == nullptr ? device.Fill(out, DType::kFloat32, entry.count, 0.0)
                        : device.Convert(out, DType::kFloat32, grad->data(),
                                         grad->dtype(), entry.count);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

std::vector<FunctionalOptimizer*> OptimizersOf(
    const std::vector<GroupStepper>& steppers) {
  std::vector<FunctionalOptimizer*> optimizers;
  for (const GroupStepper& stepper : steppers) {
    optimizers.push_back(stepper.optimizer);
  }
  return optimizers;
}

absl::Status StepBucket(const GradientBucket& bucket,
                        const std::vector<ParamGroup>& groups,
                        absl::Span<float> values,
                        const std::vector<GroupStepper>& steppers,
                        DeviceBuffer* narrowed, std::atomic<bool>* changing) {
  // The bucket's entries this rank steps, by group, and the bytes their
  // half-precision averages take.
  std::vector<std::vector<const BucketEntry*>> by_group(groups.size());
  size_t narrowed_bytes = 0;
  for (const BucketEntry& entry : bucket.entries) {
    if (steppers[entry.group].position[entry.index] < 0) continue;
    by_group[entry.group].push_back(&entry);
    const Tensor& param = *groups[entry.group].params[entry.index];
    if (param.dtype() != DType::kFloat32) narrowed_bytes += param.byte_size();
  }
  absl::StatusOr<char*> rounded_memory = narrowed->Reserve(narrowed_bytes);
  if (!rounded_memory.ok()) return rounded_memory.status();
  Backend& device = narrowed->backend();
  char* next_rounded = *rounded_memory;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (by_group[g].empty()) continue;
    const GroupStepper& stepper = steppers[g];
    std::vector<const Tensor*> grads(stepper.params.size(), nullptr);
    std::vector<Tensor> averaged;
    averaged.reserve(by_group[g].size());
    for (const BucketEntry* entry : by_group[g]) {
      const Tensor& param = *groups[g].params[entry->index];
      float* average = values.data() + entry->offset;
      if (param.dtype() == DType::kFloat32) {
        averaged.push_back(Tensor::Borrow(average, DType::kFloat32,
                                          param.shape(), device.device()));
      } else {
        // Rounded to the parameter's dtype, as its gradient would be.
        absl::Status status =
            device.Convert(next_rounded, param.dtype(), average,
                           DType::kFloat32, entry->count);
        if (!status.ok()) return status;
        averaged.push_back(Tensor::Borrow(next_rounded, param.dtype(),
                                          param.shape(), device.device()));
        next_rounded += param.byte_size();
      }
      grads[stepper.position[entry->index]] = &averaged.back();
    }
    *changing = true;
    absl::Status status = stepper.optimizer->Step(stepper.params, grads);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace distopt
