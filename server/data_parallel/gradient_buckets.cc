#include "server/data_parallel/gradient_buckets.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace distopt {

namespace {

// Which bucket takes each parameter's last slice, so that each bucket knows
// the one whose step completes its parameters.
void SetSteppedWith(std::vector<GradientBucket>& plan) {
  absl::flat_hash_map<std::pair<int, int>, size_t> last_slice;
  for (size_t k = 0; k < plan.size(); ++k) {
    for (const BucketEntry& entry : plan[k].entries) {
      last_slice[{entry.group, entry.index}] = k;
    }
  }
  for (size_t k = 0; k < plan.size(); ++k) {
    plan[k].stepped_with = k;
    for (const BucketEntry& entry : plan[k].entries) {
      plan[k].stepped_with = std::max(plan[k].stepped_with,
                                      last_slice[{entry.group, entry.index}]);
    }
  }
}

// Where `entry`'s slice goes in the buffer its parameter is put together
// in. A parameter's first slice sizes the buffer (which may move then: it
// holds nothing yet); its later slices must find it that size, holding the
// earlier ones.
absl::StatusOr<float*> AssemblyFor(const BucketEntry& entry,
                                   DeviceBuffer* assembled) {
  const size_t bytes = entry.total * sizeof(float);
  if (entry.begin > 0 && assembled->capacity() < bytes) {
    return absl::InternalError(
        absl::StrCat("StepBucket: the slices of parameter ", entry.index,
                     " of group ", entry.group, " came out of plan order"));
  }
  absl::StatusOr<char*> whole = assembled->Reserve(bytes);
  if (!whole.ok()) return whole.status();
  return reinterpret_cast<float*>(*whole) + entry.begin;
}

// Whole: owner's parameters up to its share (or one parameter larger than
// it), as long as the bucket (`size` taken so far) has room; a parameter
// larger than a bucket goes alone. Returns the elements taken.
int64_t TakeWhole(std::deque<BucketEntry>& waiting, int64_t share, int64_t size,
                  int64_t bucket_elements, std::vector<BucketEntry>* chosen) {
  int64_t taken = 0;
  while (!waiting.empty()) {
    const int64_t count = waiting.front().count;
    const bool fits_share = taken == 0 || taken + count <= share;
    const bool fits_bucket =
        size + taken == 0 || size + taken + count <= bucket_elements;
    if (!fits_share || !fits_bucket) break;
    chosen->push_back(waiting.front());
    waiting.pop_front();
    taken += count;
  }
  return taken;
}

// Sliced: whole parameters while they fit in `room`; one larger than a
// share, which no bucket could take whole, is cut to fill it. Returns the
// elements taken.
int64_t TakeSliced(std::deque<BucketEntry>& waiting, int64_t share,
                   int64_t room, std::vector<BucketEntry>* chosen) {
  int64_t taken = 0;
  while (!waiting.empty() && taken < room) {
    BucketEntry& front = waiting.front();
    const int64_t left = room - taken;
    if (front.count > left && front.count <= share && taken > 0) break;
    BucketEntry slice = front;
    slice.count = std::min(front.count, left);
    chosen->push_back(slice);
    front.begin += slice.count;
    front.count -= slice.count;
    if (front.count == 0) waiting.pop_front();
    taken += slice.count;
  }
  return taken;
}

// Sliced, an owner puts a sliced parameter together in a buffer of its size
// (StepBucket). When the largest parameter would be sliced, that buffer
// comes out of the buckets, down to half of them, so that a bucket and the
// buffer together stay within bucket_elements unless that parameter is
// larger than half of it. (The smaller buckets may slice parameters the
// full ones would not have; none is larger than the largest.)
int64_t SlicedBucketElements(
    const std::vector<std::deque<BucketEntry>>& waiting,
    int64_t bucket_elements) {
  int64_t largest = 0;
  for (const std::deque<BucketEntry>& entries : waiting) {
    for (const BucketEntry& entry : entries) {
      largest = std::max(largest, entry.count);
    }
  }
  if (largest <= bucket_elements / static_cast<int64_t>(waiting.size())) {
    return bucket_elements;
  }
  return std::max(std::max<int64_t>(1, bucket_elements / 2),
                  bucket_elements - largest);
}

}  // namespace

std::vector<GradientBucket> PlanGradientBuckets(
    const std::vector<ParamGroup>& groups,
    const std::vector<std::vector<int>>& owner, int owners,
    const Presence& present, int64_t bucket_elements, Slicing slicing) {
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
      entry.total = entry.count;
      waiting[entry.owner].push_back(entry);
    }
  }
  if (slicing == Slicing::kSliced) {
    bucket_elements = SlicedBucketElements(waiting, bucket_elements);
  }
  const bool sliced = slicing != Slicing::kWhole;
  // Every owner gets about an equal share of each bucket.
  const int64_t share = std::max<int64_t>(1, bucket_elements / owners);
  std::vector<GradientBucket> plan;
  auto pending = [&] {
    return absl::c_count_if(waiting, [](const auto& q) { return !q.empty(); });
  };
  while (const int64_t active = pending()) {
    GradientBucket bucket;
    bucket.blocks.assign(owners, 0);
    // Sliced, the owners with gradients left split the whole bucket.
    const int64_t room = std::max<int64_t>(1, bucket_elements / active);
    // Owners take turns coming first, so that none always waits for room.
    std::vector<std::vector<BucketEntry>> chosen(owners);
    int64_t size = 0;
    const int first = static_cast<int>(plan.size() % owners);
    for (int turn = 0; turn < owners; ++turn) {
      const int r = (first + turn) % owners;
      const int64_t taken =
          sliced
              ? TakeSliced(waiting[r], share, room, &chosen[r])
              : TakeWhole(waiting[r], share, size, bucket_elements, &chosen[r]);
      size += taken;
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
  SetSteppedWith(plan);
  return plan;
}

int64_t LargestBucket(const std::vector<GradientBucket>& plan) {
  int64_t largest = 0;
  for (const GradientBucket& bucket : plan) {
    largest = std::max(largest, bucket.size);
  }
  return largest;
}

int64_t LargestBlock(const std::vector<GradientBucket>& plan, int rank) {
  int64_t largest = 0;
  for (const GradientBucket& bucket : plan) {
    largest = std::max(largest, static_cast<int64_t>(bucket.blocks[rank]));
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
        grad == nullptr
            ? device.Fill(out, DType::kFloat32, entry.count, 0.0)
            : device.Convert(out, DType::kFloat32,
                             static_cast<const char*>(grad->data()) +
                                 entry.begin * ElementSize(grad->dtype()),
                             grad->dtype(), entry.count);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

std::vector<std::vector<absl::Span<const float>>> GradientSpans(
    const GradientBucket& bucket, const GroupGradientPointers& grads) {
  std::vector<std::vector<absl::Span<const float>>> spans(bucket.blocks.size());
  for (const BucketEntry& entry : bucket.entries) {
    const Tensor& grad = *grads[entry.group][entry.index];
    spans[entry.owner].push_back(absl::MakeConstSpan(
        static_cast<const float*>(grad.data()) + entry.begin,
        static_cast<size_t>(entry.count)));
  }
  return spans;
}

int64_t BlockBegin(const GradientBucket& bucket, int rank) {
  int64_t begin = 0;
  for (int r = 0; r < rank; ++r) begin += bucket.blocks[r];
  return begin;
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
                        absl::Span<float> values, int64_t values_begin,
                        const std::vector<GroupStepper>& steppers,
                        DeviceBuffer* narrowed, DeviceBuffer* assembled,
                        std::atomic<bool>* changing) {
  Backend& device = narrowed->backend();
  // The bucket's parameters this rank steps now, by group, each with its
  // fp32 average: whole ones in `values`, a sliced one whose last slice is
  // here in `assembled`. Slices of a parameter that goes on are put
  // together only after the steps, which may still read the parameter
  // `assembled` completes.
  struct Ready {
    const BucketEntry* entry;
    float* average;
  };
  std::vector<std::vector<Ready>> by_group(groups.size());
  std::vector<const BucketEntry*> continued;
  size_t narrowed_bytes = 0;
  for (const BucketEntry& entry : bucket.entries) {
    if (steppers[entry.group].position[entry.index] < 0) continue;
    if (entry.offset < values_begin ||
        entry.offset + entry.count >
            values_begin + static_cast<int64_t>(values.size())) {
      return absl::InternalError(absl::StrCat(
          "StepBucket: the averages of parameter ", entry.index, " of group ",
          entry.group, " are not among the values given"));
    }
    float* average = values.data() + (entry.offset - values_begin);
    if (entry.count != entry.total) {
      if (assembled == nullptr) {
        return absl::InternalError("StepBucket: a sliced plan needs assembly");
      }
      if (entry.begin + entry.count != entry.total) {
        continued.push_back(&entry);
        continue;
      }
      absl::StatusOr<float*> into = AssemblyFor(entry, assembled);
      if (!into.ok()) return into.status();
      absl::Status status =
          device.CopyWithinDevice(*into, average, entry.count * sizeof(float));
      if (!status.ok()) return status;
      average = *into - entry.begin;
    }
    by_group[entry.group].push_back({&entry, average});
    const Tensor& param = *groups[entry.group].params[entry.index];
    if (param.dtype() != DType::kFloat32) narrowed_bytes += param.byte_size();
  }
  absl::StatusOr<char*> rounded_memory = narrowed->Reserve(narrowed_bytes);
  if (!rounded_memory.ok()) return rounded_memory.status();
  char* next_rounded = *rounded_memory;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (by_group[g].empty()) continue;
    const GroupStepper& stepper = steppers[g];
    std::vector<const Tensor*> grads(stepper.params.size(), nullptr);
    std::vector<Tensor> averaged;
    averaged.reserve(by_group[g].size());
    for (const Ready& ready : by_group[g]) {
      const Tensor& param = *groups[g].params[ready.entry->index];
      float* average = ready.average;
      if (param.dtype() == DType::kFloat32) {
        averaged.push_back(Tensor::Borrow(average, DType::kFloat32,
                                          param.shape(), device.device()));
      } else {
        // Rounded to the parameter's dtype, as its gradient would be.
        absl::Status status =
            device.Convert(next_rounded, param.dtype(), average,
                           DType::kFloat32, ready.entry->total);
        if (!status.ok()) return status;
        averaged.push_back(Tensor::Borrow(next_rounded, param.dtype(),
                                          param.shape(), device.device()));
        next_rounded += param.byte_size();
      }
      grads[stepper.position[ready.entry->index]] = &averaged.back();
    }
    *changing = true;
    absl::Status status = stepper.optimizer->Step(stepper.params, grads);
    if (!status.ok()) return status;
  }
  for (const BucketEntry* entry : continued) {
    absl::StatusOr<float*> into = AssemblyFor(*entry, assembled);
    if (!into.ok()) return into.status();
    absl::Status status = device.CopyWithinDevice(
        *into, values.data() + (entry->offset - values_begin),
        entry->count * sizeof(float));
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace distopt
