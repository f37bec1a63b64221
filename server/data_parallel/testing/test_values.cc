#include "server/data_parallel/testing/test_values.h"

#include <algorithm>

#include "common/half.h"

namespace distopt {
namespace data_parallel_testing {

Tensor FromFloats(const std::vector<float>& values, const ParamSpec& spec) {
  Tensor t = *Tensor::AllocateHost(spec.dtype, spec.shape);
  NarrowFromFloat(values, spec.dtype, t.data());
  return t;
}

std::vector<float> ToFloats(const Tensor& t) {
  std::vector<float> values(t.num_elements());
  WidenToFloat(t.dtype(), t.data(), absl::MakeSpan(values));
  return values;
}

Tensor Gradient(int g, int i, int s, int r, const ParamSpec& spec) {
  std::vector<float> values(NumElements(spec.shape));
  for (int64_t e = 0; e < static_cast<int64_t>(values.size()); ++e) {
    values[e] = static_cast<float>(
                    ((e * 7 + i * 3 + g * 5 + s * 11 + r * 13) % 17) - 8) /
                64.0f;
  }
  return FromFloats(values, spec);
}

Tensor Initial(int g, int i, const ParamSpec& spec) {
  std::vector<float> values(NumElements(spec.shape));
  for (int64_t e = 0; e < static_cast<int64_t>(values.size()); ++e) {
    values[e] = static_cast<float>((e % 13) - 6) / 8.0f + g + 0.5f * i;
  }
  return FromFloats(values, spec);
}

}  // namespace data_parallel_testing
}  // namespace distopt
