#include "server/data_parallel/gradient_buckets.h"

#include <algorithm>
#include <deque>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/cpu_backend.h"
#include "common/half.h"

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
                        const std::vector<ParamGroup>& groups,
                        const GroupGradientPointers& grads,
                        absl::Span<float> values) {
  for (const BucketEntry& entry : bucket.entries) {
    absl::Span<float> out = values.subspan(entry.offset, entry.count);
    const Tensor* given = grads[entry.group][entry.index];
    if (given == nullptr) {
      std::fill(out.begin(), out.end(), 0.0f);
      continue;
    }
    Tensor grad = *given;
    if (!grad.device().is_cpu()) {
      absl::StatusOr<Tensor> host = grad.CloneTo(CpuBackend());
      if (!host.ok()) return host.status();
      grad = *std::move(host);
    }
    switch (grad.dtype()) {
      case DType::kFloat32:
        absl::c_copy(grad.host_span<float>(), out.begin());
        break;
      case DType::kFloat16:
        HalfToFloat(grad.host_span<uint16_t>(), out);
        break;
      case DType::kBFloat16:
        BFloat16ToFloat(grad.host_span<uint16_t>(), out);
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "grads[", entry.group, "][", entry.index, "]: ", grad.DebugString(),
            "; expected float32, float16 or bfloat16"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> BucketGradient(const BucketEntry& entry,
                                      const std::vector<ParamGroup>& groups,
                                      absl::Span<float> values) {
  const Tensor& param = *groups[entry.group].params[entry.index];
  float* averaged = values.data() + entry.offset;
  if (param.dtype() == DType::kFloat32) {
    return Tensor::Borrow(averaged, DType::kFloat32, param.shape(),
                          Device::Cpu());
  }
  absl::StatusOr<Tensor> rounded =
      Tensor::AllocateHost(param.dtype(), param.shape());
  if (!rounded.ok()) return rounded.status();
  absl::Span<const float> in(averaged, entry.count);
  if (param.dtype() == DType::kFloat16) {
    FloatToHalf(in, rounded->host_span<uint16_t>());
  } else {
    FloatToBFloat16(in, rounded->host_span<uint16_t>());
  }
  return rounded;
}

}  // namespace distopt
