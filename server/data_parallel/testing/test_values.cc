#include "server/data_parallel/testing/test_values.h"

#include <algorithm>

#include "common/half.h"

namespace distopt {
namespace data_parallel_testing {

Tensor FromFloats(const std::vector<float>& values, const ParamSpec& spec) {
  Tensor t = *Tensor::AllocateHost(spec.dtype, spec.shape);
  switch (spec.dtype) {
    case DType::kFloat16:
      FloatToHalf(values, t.host_span<uint16_t>());
      break;
    case DType::kBFloat16:
      FloatToBFloat16(values, t.host_span<uint16_t>());
      break;
    default:
      std::copy(values.begin(), values.end(), t.host_span<float>().begin());
  }
  return t;
}

std::vector<float> ToFloats(const Tensor& t) {
  std::vector<float> values(t.num_elements());
  switch (t.dtype()) {
    case DType::kFloat16:
      HalfToFloat(t.host_span<uint16_t>(), absl::MakeSpan(values));
      break;
    case DType::kBFloat16:
      BFloat16ToFloat(t.host_span<uint16_t>(), absl::MakeSpan(values));
      break;
    default:
      std::copy_n(t.host_span<float>().begin(), values.size(), values.begin());
  }
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
