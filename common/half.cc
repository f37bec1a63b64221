#include "common/half.h"

#include <algorithm>
#include <cstring>

namespace distopt {
namespace {

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {  // Inf or NaN: keep the payload.
    return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent != 0) {  // Normal.
    return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  }
  if (mantissa == 0) return BitsToFloat(sign);  // Signed zero.
  // Subnormal: normalise into fp32, which has the range for it.
  int shift = 0;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  mantissa &= 0x3ffu;
  return BitsToFloat(sign | static_cast<uint32_t>(113 - shift) << 23 |
                     (mantissa << 13));
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN.
    if (abs == 0x7f800000u) return sign | 0x7c00u;
    // NaN: keep the top payload bits, so that every fp16 NaN survives a round
    // trip; a payload that only had low bits becomes the quiet NaN.
    uint16_t payload = static_cast<uint16_t>((abs >> 13) & 0x3ffu);
    if (payload == 0) payload = 0x200u;
    return sign | 0x7c00u | payload;
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // Rounds past 65504: Inf.
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: scale so that the half subnormal unit
    // (2^-24) becomes 1 and round the integer part to nearest even.
    if (abs < 0x33000000u) return sign;  // Below half the smallest subnormal.
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14 + (127 - 1 - exponent) - 0
    uint32_t result = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) {
      ++result;
    }
    return sign | static_cast<uint16_t>(result);
  }
  // Normal: rebias the exponent and round the 13 dropped bits to nearest even.
  uint32_t rebased = abs - 0x38000000u;  // (127 - 15) << 23
  const uint32_t remainder = rebased & 0x1fffu;
  uint32_t result = rebased >> 13;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u))) {
    ++result;  // A carry into the exponent is the correct rounding.
  }
  return sign | static_cast<uint16_t>(result);
}

float BFloat16ToFloat(uint16_t bits) {
  return BitsToFloat(static_cast<uint32_t>(bits) << 16);
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    // NaN: truncate, keeping sign and top payload bits (so every bf16 NaN
    // round-trips); a payload that only had low bits becomes the quiet NaN.
    uint16_t truncated = static_cast<uint16_t>(bits >> 16);
    if ((truncated & 0x7fu) == 0) truncated |= 0x40u;
    return truncated;
  }
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

void HalfToFloat(absl::Span<const uint16_t> in, absl::Span<float> out) {
  for (size_t i = 0; i < in.size(); ++i) out[i] = HalfToFloat(in[i]);
}

void FloatToHalf(absl::Span<const float> in, absl::Span<uint16_t> out) {
  for (size_t i = 0; i < in.size(); ++i) out[i] = FloatToHalf(in[i]);
}

void BFloat16ToFloat(absl::Span<const uint16_t> in, absl::Span<float> out) {
  for (size_t i = 0; i < in.size(); ++i) out[i] = BFloat16ToFloat(in[i]);
}

void FloatToBFloat16(absl::Span<const float> in, absl::Span<uint16_t> out) {
  for (size_t i = 0; i < in.size(); ++i) out[i] = FloatToBFloat16(in[i]);
}

void WidenToFloat(DType dtype, const void* in, absl::Span<float> out) {
  const auto* bits = static_cast<const uint16_t*>(in);
  switch (dtype) {
    case DType::kFloat16:
      HalfToFloat(absl::MakeConstSpan(bits, out.size()), out);
      break;
    case DType::kBFloat16:
      BFloat16ToFloat(absl::MakeConstSpan(bits, out.size()), out);
      break;
    default:
      std::copy_n(static_cast<const float*>(in), out.size(), out.begin());
  }
}

void NarrowFromFloat(absl::Span<const float> in, DType dtype, void* out) {
  auto* bits = static_cast<uint16_t*>(out);
  switch (dtype) {
    case DType::kFloat16:
      FloatToHalf(in, absl::MakeSpan(bits, in.size()));
      break;
    case DType::kBFloat16:
      FloatToBFloat16(in, absl::MakeSpan(bits, in.size()));
      break;
    default:
      std::copy(in.begin(), in.end(), static_cast<float*>(out));
  }
}

}  // namespace distopt
