#include "server/data_parallel/gradient_buckets.h"

#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/cpu_backend.h"
#include "common/half.h"

namespace distopt {

GradientBuckets::GradientBuckets(const std::vector<ParamGroup>& groups,
                                 const std::vector<std::vector<int>>& bucket_of,
                                 int buckets, const Presence& present,
                                 std::vector<float>* storage)
    : groups_(groups) {
  offset_.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    offset_[g].assign(groups[g].params.size(), -1);
  }
  int64_t size = 0;
  for (int bucket = 0; bucket < buckets; ++bucket) {
    begin_.push_back(size);
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t i = 0; i < groups[g].params.size(); ++i) {
        if (bucket_of[g][i] != bucket || !present[g][i]) continue;
        offset_[g][i] = size;
        size += groups[g].params[i]->num_elements();
      }
    }
  }
  begin_.push_back(size);
  storage->resize(size);
  values_ = absl::MakeSpan(*storage);
}

absl::Span<float> GradientBuckets::bucket(int index) {
  return values_.subspan(begin_[index], begin_[index + 1] - begin_[index]);
}

absl::Status GradientBuckets::Fill(const GroupGradientPointers& grads) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < grads[g].size(); ++i) {
      if (offset_[g][i] < 0) continue;
      if (grads[g][i] == nullptr) {
        std::fill_n(values_.begin() + offset_[g][i],
                    groups_[g].params[i]->num_elements(), 0.0f);
        continue;
      }
      Tensor grad = *grads[g][i];
      if (!grad.device().is_cpu()) {
        absl::StatusOr<Tensor> host = grad.CloneTo(CpuBackend());
        if (!host.ok()) return host.status();
        grad = *std::move(host);
      }
      absl::Span<float> out =
          absl::MakeSpan(values_).subspan(offset_[g][i], grad.num_elements());
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
          return absl::InvalidArgumentError(
              absl::StrCat("grads[", g, "][", i, "]: ", grad.DebugString(),
                           "; expected float32, float16 or bfloat16"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> GradientBuckets::Gradient(int g, int i) {
  const Tensor& param = *groups_[g].params[i];
  float* averaged = values_.data() + offset_[g][i];
  if (param.dtype() == DType::kFloat32) {
    return Tensor::Borrow(averaged, DType::kFloat32, param.shape(),
                          Device::Cpu());
  }
  absl::StatusOr<Tensor> rounded =
      Tensor::AllocateHost(param.dtype(), param.shape());
  if (!rounded.ok()) return rounded.status();
  absl::Span<const float> in(averaged, param.num_elements());
  if (param.dtype() == DType::kFloat16) {
    FloatToHalf(in, rounded->host_span<uint16_t>());
  } else {
    FloatToBFloat16(in, rounded->host_span<uint16_t>());
  }
  return rounded;
}

}  // namespace distopt
