// IEEE fp16 and bfloat16 <-> fp32 conversions.
//
// Narrowing rounds to nearest, ties to even (as torch and CUDA do); NaN stays
// NaN (quiet, sign kept) and infinities stay infinite. Widening is exact, so
// every 16-bit pattern survives a round trip through fp32.
#ifndef DISTOPT_COMMON_HALF_H_
#define DISTOPT_COMMON_HALF_H_

#include <cstdint>

#include "absl/types/span.h"
#include "common/dtype.h"

namespace distopt {

float HalfToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);

float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);

// Bulk forms; `out` must be as long as `in`.
void HalfToFloat(absl::Span<const uint16_t> in, absl::Span<float> out);
void FloatToHalf(absl::Span<const float> in, absl::Span<uint16_t> out);
void BFloat16ToFloat(absl::Span<const uint16_t> in, absl::Span<float> out);
void FloatToBFloat16(absl::Span<const float> in, absl::Span<uint16_t> out);

// Values of a floating dtype (float32, float16 or bfloat16) at `in`, one
// per element of `out`, as fp32 (copied for float32).
void WidenToFloat(DType dtype, const void* in, absl::Span<float> out);
// fp32 values into `out` as `dtype` (float32, float16 or bfloat16).
void NarrowFromFloat(absl::Span<const float> in, DType dtype, void* out);

}  // namespace distopt

#endif  // DISTOPT_COMMON_HALF_H_
