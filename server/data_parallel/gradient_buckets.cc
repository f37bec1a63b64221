#include "server/data_parallel/gradient_buckets.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"

namespace distopt {

namespace {

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

// `entry`'s averaged gradient as its parameter takes it: the fp32 averages
// where they are, or rounded to the parameter's dtype (as its gradient
// would be) at *next_rounded, which moves past them; shaped as the
// parameter, or flat for a slice.
absl::StatusOr<Tensor> AveragedGradient(const BucketEntry& entry,
                                        const Tensor& param, float* average,
                                        Backend& device, char** next_rounded) {
  const Shape shape =
      entry.count != entry.total ? Shape{entry.count} : param.shape();
  if (param.dtype() == DType::kFloat32) {
    return Tensor::Borrow(average, DType::kFloat32, shape, device.device());
  }
  char* rounded = *next_rounded;
  absl::Status status = device.Convert(rounded, param.dtype(), average,
                                       DType::kFloat32, entry.count);
  if (!status.ok()) return status;
  *next_rounded += entry.count * ElementSize(param.dtype());
  return Tensor::Borrow(rounded, param.dtype(), shape, device.device());
}

}  // namespace

std::vector<GradientBucket> PlanGradientBuckets(
    const std::vector<ParamGroup>& groups,
    const std::vector<std::vector<int>>& owner, int owners,
    const Presence& present, int64_t bucket_elements, Slicing slicing,
    int64_t block_elements) {
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
  const bool sliced = slicing == Slicing::kSliced;
  // Every owner gets about an equal share of each bucket.
  const int64_t share = std::max<int64_t>(1, bucket_elements / owners);
  std::vector<GradientBucket> plan;
  auto pending = [&] {
    return absl::c_count_if(waiting, [](const auto& q) { return !q.empty(); });
  };
  while (const int64_t active = pending()) {
    GradientBucket bucket;
    bucket.blocks.assign(owners, 0);
    // Sliced, the owners with gradients left split the whole bucket, each
    // up to block_elements.
    int64_t room = std::max<int64_t>(1, bucket_elements / active);
    if (block_elements > 0) room = std::min(room, block_elements);
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
                        absl::Span<float> values,
                        const std::vector<GroupStepper>& steppers,
                        DeviceBuffer* narrowed, std::atomic<bool>* changing) {
  Backend& device = narrowed->backend();
  // The bucket's entries this rank steps, by group, each with its fp32
  // average. Whole parameters are stepped together (one fused launch on a
  // GPU); a slice of a parameter cut across buckets is stepped alone, in
  // plan order.
  struct Ready {
    const BucketEntry* entry;
    float* average;
  };
  std::vector<std::vector<Ready>> by_group(groups.size());
  size_t narrowed_bytes = 0;
  for (const BucketEntry& entry : bucket.entries) {
    if (steppers[entry.group].position[entry.index] < 0) continue;
    if (entry.offset + entry.count > static_cast<int64_t>(values.size())) {
      return absl::InternalError(absl::StrCat(
          "StepBucket: the averages of parameter ", entry.index, " of group ",
          entry.group, " are not among the values given"));
    }
    by_group[entry.group].push_back({&entry, values.data() + entry.offset});
    const DType dtype = groups[entry.group].params[entry.index]->dtype();
    if (dtype != DType::kFloat32) {
      narrowed_bytes += entry.count * ElementSize(dtype);
    }
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
    bool whole = false;
    for (const Ready& ready : by_group[g]) {
      const BucketEntry& entry = *ready.entry;
      absl::StatusOr<Tensor> gradient =
          AveragedGradient(entry, *groups[g].params[entry.index], ready.average,
                           device, &next_rounded);
      if (!gradient.ok()) return gradient.status();
      averaged.push_back(*std::move(gradient));
      const int position = stepper.position[entry.index];
      if (entry.count == entry.total) {
        grads[position] = &averaged.back();
        whole = true;
        continue;
      }
      *changing = true;
      absl::Status status = stepper.optimizer->StepSlice(
          position, *stepper.params[position], entry.begin, averaged.back());
      if (!status.ok()) return status;
    }
    if (!whole) continue;
    *changing = true;
    absl::Status status = stepper.optimizer->Step(stepper.params, grads);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status StepReducedPiece(const GradientBucket& bucket,
                              const std::vector<ParamGroup>& groups,
                              int64_t piece_begin,
                              absl::Span<const float> averages,
                              const std::vector<GroupStepper>& steppers,
                              size_t* next_entry, std::atomic<bool>* changing) {
  const int64_t piece_end = piece_begin + static_cast<int64_t>(averages.size());
  // Entries lie in offset order, and pieces come in order: those that end
  // before this piece are done for every later one too.
  for (size_t e = *next_entry; e < bucket.entries.size(); ++e) {
    const BucketEntry& entry = bucket.entries[e];
    if (entry.offset >= piece_end) break;
    if (entry.offset + entry.count <= piece_begin) {
      *next_entry = e + 1;
      continue;
    }
    const int position = steppers[entry.group].position[entry.index];
    if (position < 0) continue;
    const int64_t begin = std::max(entry.offset, piece_begin);
    const int64_t end = std::min(entry.offset + entry.count, piece_end);
    const Tensor& param = *groups[entry.group].params[entry.index];
    if (param.dtype() != DType::kFloat32 || !param.device().is_cpu()) {
      return absl::InternalError(absl::StrCat(
          "StepReducedPiece: parameter ", entry.index, " of group ",
          entry.group, " is ", DTypeName(param.dtype()), " on ",
          param.device().ToString(), "; expected float32 in host memory"));
    }
    // Read only: the optimizer takes its gradient as a const Tensor.
    const Tensor gradient = Tensor::Borrow(
        const_cast<float*>(averages.data() + (begin - piece_begin)),
        DType::kFloat32, Shape{end - begin}, param.device());
    *changing = true;
    const GroupStepper& stepper = steppers[entry.group];
    absl::Status status = stepper.optimizer->StepSlice(
        position, *stepper.params[position],
        entry.begin + (begin - entry.offset), gradient);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace distopt
