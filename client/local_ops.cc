#include "client/local_ops.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/cpu_backend.h"

namespace distopt {

Variable Relu(DistAutogradContext& context, const Variable& x) {
  Tensor y = *Tensor::AllocateHost(DType::kFloat32, x.value.shape());
  const float* in = static_cast<const float*>(x.value.data());
  float* out = static_cast<float*>(y.data());
  for (int64_t i = 0; i < y.num_elements(); ++i) out[i] = std::max(in[i], 0.0f);
  const Tensor input = x.value;
  return context.Record(
      {x}, std::move(y),
      [input](const Tensor& gradient)
          -> absl::StatusOr<std::vector<std::optional<Tensor>>> {
        Tensor dx = *Tensor::AllocateHost(DType::kFloat32, input.shape());
        const float* in = static_cast<const float*>(input.data());
        const float* dy = static_cast<const float*>(gradient.data());
        float* out = static_cast<float*>(dx.data());
        for (int64_t i = 0; i < dx.num_elements(); ++i) {
          out[i] = in[i] > 0 ? dy[i] : 0.0f;
        }
        return std::vector<std::optional<Tensor>>{std::move(dx)};
      });
}

absl::StatusOr<CrossEntropyResult> SoftmaxCrossEntropy(
    DistAutogradContext& context, const Variable& logits,
    const std::vector<int64_t>& labels) {
  const Shape& shape = logits.value.shape();
  if (logits.value.dtype() != DType::kFloat32 || shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits: ", logits.value.DebugString(),
                     "; expected float32 [N, classes]"));
  }
  const int64_t n = shape[0];
  const int64_t classes = shape[1];
  if (static_cast<int64_t>(labels.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "labels: ", labels.size(), " labels; expected ", n, " (one per row)"));
  }
  const float* z = static_cast<const float*>(logits.value.data());
  Tensor softmax = *Tensor::AllocateHost(DType::kFloat32, shape);
  float* p = static_cast<float*>(softmax.data());
  CrossEntropyResult result;
  double total = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (labels[r] < 0 || labels[r] >= classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "labels[", r, "]: ", labels[r], "; expected 0 to ", classes - 1));
    }
    const float* row = z + r * classes;
    const int64_t best = std::max_element(row, row + classes) - row;
    result.predictions.push_back(best);
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(row[c] - row[best]);
    for (int64_t c = 0; c < classes; ++c) {
      p[r * classes + c] =
          static_cast<float>(std::exp(row[c] - row[best]) / sum);
    }
    total += -(row[labels[r]] - row[best] - std::log(sum));
  }
  Tensor loss = *Tensor::AllocateHost(DType::kFloat32, {});
  loss.host_span<float>()[0] =
      static_cast<float>(total / std::max<int64_t>(n, 1));
  result.loss = context.Record(
      {logits}, std::move(loss),
      [softmax, labels, n, classes](const Tensor& gradient)
          -> absl::StatusOr<std::vector<std::optional<Tensor>>> {
        // d(mean loss)/dz = (softmax - onehot) / N, times the loss gradient.
        const float scale = gradient.host_span<float>()[0] /
                            static_cast<float>(std::max<int64_t>(n, 1));
        Tensor dz = *softmax.CloneTo(CpuBackend());
        float* d = static_cast<float*>(dz.data());
        for (int64_t r = 0; r < n; ++r) d[r * classes + labels[r]] -= 1.0f;
        for (int64_t i = 0; i < dz.num_elements(); ++i) d[i] *= scale;
        return std::vector<std::optional<Tensor>>{std::move(dz)};
      });
  return result;
}

}  // namespace distopt
