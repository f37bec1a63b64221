#include "common/half.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace distopt {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

TEST(HalfTest, EveryFp16PatternRoundTripsThroughFp32) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float widened = HalfToFloat(static_cast<uint16_t>(bits));
    ASSERT_EQ(FloatToHalf(widened), bits) << "pattern 0x" << std::hex << bits;
  }
}

TEST(HalfTest, EveryBf16PatternRoundTripsThroughFp32) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float widened = BFloat16ToFloat(static_cast<uint16_t>(bits));
    ASSERT_EQ(FloatToBFloat16(widened), bits)
        << "pattern 0x" << std::hex << bits;
  }
}

// The compiler's own _Float16 is the reference: g++ 12 has it on x86-64;
// clang 14 (the ASan build, .bazelrc) has not: there only the round trips
// and the bf16 and special-value tests run.
#if defined(__FLT16_MAX__)
TEST(HalfTest, Fp16WideningMatchesCompilerFloat16) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    _Float16 h;
    const uint16_t narrow = static_cast<uint16_t>(bits);
    std::memcpy(&h, &narrow, sizeof(h));
    const float expected = static_cast<float>(h);
    const float actual = HalfToFloat(narrow);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(actual));
    } else {
      ASSERT_EQ(Bits(actual), Bits(expected)) << std::hex << bits;
    }
  }
}

// The compiler's float -> _Float16 conversion rounds to nearest even: check
// ours against it on a stride through all fp32 patterns, and around every
// fp16 rounding boundary.
TEST(HalfTest, Fp16NarrowingMatchesCompilerFloat16) {
  auto check = [](uint32_t float_bits) {
    const float value = FromBits(float_bits);
    const _Float16 h = static_cast<_Float16>(value);
    uint16_t expected;
    std::memcpy(&expected, &h, sizeof(expected));
    const uint16_t actual = FloatToHalf(value);
    if (std::isnan(value)) {
      ASSERT_EQ(actual & 0x7c00u, 0x7c00u);
      ASSERT_NE(actual & 0x3ffu, 0u);
      ASSERT_EQ(actual & 0x8000u, expected & 0x8000u);
    } else {
      ASSERT_EQ(actual, expected) << "float 0x" << std::hex << float_bits;
    }
  };
  for (uint64_t b = 0; b <= 0xffffffffu; b += 4093) {
    check(static_cast<uint32_t>(b));
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const uint32_t f = Bits(HalfToFloat(static_cast<uint16_t>(h)));
    for (uint32_t delta : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu}) {
      check(f + delta);
      check((f + delta) | 0x80000000u);
    }
  }
}

#endif  // defined(__FLT16_MAX__)

double NearestBf16Reference(float value) {
  // The two bf16 neighbours of `value`, chosen by distance, ties to even.
  const uint32_t b = Bits(value);
  const uint32_t down = b & 0xffff0000u;
  const uint32_t up = down + 0x10000u;
  // Past the largest finite bf16 the next step up is 2^128, which rounds to
  // infinity: measure the distance to it as a double.
  const double up_value = (up & 0x7fffffffu) == 0x7f800000u
                              ? std::copysign(std::ldexp(1.0, 128), value)
                              : static_cast<double>(FromBits(up));
  const double result_up = static_cast<double>(FromBits(up));
  const double d_down = std::fabs(static_cast<double>(FromBits(down)) - value);
  const double d_up = std::fabs(up_value - value);
  if (d_down < d_up) return FromBits(down);
  if (d_up < d_down) return result_up;
  return ((down >> 16) & 1u) ? result_up : FromBits(down);
}

TEST(HalfTest, Bf16NarrowingRoundsToNearestEven) {
  for (uint64_t b = 0; b <= 0xffffffffu; b += 4099) {
    const float value = FromBits(static_cast<uint32_t>(b));
    if (std::isnan(value) || std::isinf(value)) continue;
    const uint16_t actual = FloatToBFloat16(value);
    const double expected = NearestBf16Reference(value);
    ASSERT_EQ(static_cast<double>(BFloat16ToFloat(actual)), expected)
        << "float 0x" << std::hex << b;
  }
  // Exact ties: 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125.
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.00390625f)), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.01171875f)), 1.015625f);
}

TEST(HalfTest, SpecialValuesArePreserved) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(FloatToHalf(inf), 0x7c00u);
  EXPECT_EQ(FloatToHalf(-inf), 0xfc00u);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(nan))));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(-nan))));
  EXPECT_EQ(FloatToBFloat16(inf), 0x7f80u);
  EXPECT_EQ(FloatToBFloat16(-inf), 0xff80u);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(nan))));
  // A NaN whose payload sits only in the dropped bits must stay NaN.
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(FromBits(0x7f800001u)))));
  EXPECT_TRUE(
      std::isnan(BFloat16ToFloat(FloatToBFloat16(FromBits(0x7f800001u)))));
  // Overflow: 65520 is the first value that rounds to fp16 infinity.
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bffu);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bffu);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00u);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80u);
  // Smallest fp16 subnormal and ties around it.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001u);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000u);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002u);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000u);
}

TEST(HalfTest, BulkFormsMatchScalarForms) {
  const float in[] = {0.1f, -2.5f, 1e-6f, 70000.0f};
  uint16_t half[4];
  uint16_t bf16[4];
  float back[4];
  FloatToHalf(in, absl::MakeSpan(half));
  FloatToBFloat16(in, absl::MakeSpan(bf16));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(half[i], FloatToHalf(in[i]));
    EXPECT_EQ(bf16[i], FloatToBFloat16(in[i]));
  }
  HalfToFloat(half, absl::MakeSpan(back));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], HalfToFloat(half[i]));
  BFloat16ToFloat(bf16, absl::MakeSpan(back));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], BFloat16ToFloat(bf16[i]));
}

}  // namespace
}  // namespace distopt
