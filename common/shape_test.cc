#include "common/shape.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

TEST(ShapeTest, CountsElements) {
  EXPECT_EQ(*CheckedNumElements({}, DType::kFloat32, "shape"), 1);
  EXPECT_EQ(*CheckedNumElements({2, 3, 4}, DType::kFloat32, "shape"), 24);
  EXPECT_EQ(*CheckedNumElements({5, 0, 7}, DType::kFloat32, "shape"), 0);
  EXPECT_EQ(NumElements({2, 3}), 6);
}

// Huge dimensions beside a zero: zero elements, with no overflow on the
// way (the fuzzers' first finding, a UBSan report in NumElements).
TEST(ShapeTest, AZeroDimensionMakesZeroWhateverTheOthers) {
  const Shape shape = {int64_t{1} << 40, int64_t{1} << 40, 0};
  EXPECT_EQ(*CheckedNumElements(shape, DType::kFloat32, "shape"), 0);
  EXPECT_EQ(NumElements(shape), 0);
}

TEST(ShapeTest, RejectsNegativeDimensionNamingIt) {
  absl::StatusOr<int64_t> count =
      CheckedNumElements({2, -1}, DType::kFloat32, "shape");
  ASSERT_EQ(count.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(count.status().message(), HasSubstr("shape[1]"));
  EXPECT_THAT(count.status().message(), HasSubstr(">= 0"));
}

TEST(ShapeTest, RejectsOverflowOfElementsAndBytes) {
  const int64_t big = int64_t{1} << 32;
  EXPECT_EQ(
      CheckedNumElements({big, big}, DType::kFloat32, "shape").status().code(),
      absl::StatusCode::kInvalidArgument);
  // 2^60 int64 elements fit in int64 as a count but not as bytes.
  EXPECT_EQ(CheckedNumElements({int64_t{1} << 60}, DType::kInt64, "shape")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      CheckedNumElements({int64_t{1} << 59}, DType::kInt64, "shape").ok());
}

TEST(ShapeTest, RejectsTooManyDimensions) {
  Shape shape(kMaxRank + 1, 1);
  EXPECT_EQ(CheckedNumElements(shape, DType::kFloat32, "shape").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShapeTest, Prints) {
  EXPECT_EQ(ShapeToString({}), "[]");
  EXPECT_EQ(ShapeToString({2, 3}), "[2, 3]");
}

TEST(DTypeTest, NamesSizesAndParsing) {
  EXPECT_EQ(ElementSize(DType::kFloat32), 4u);
  EXPECT_EQ(ElementSize(DType::kFloat16), 2u);
  EXPECT_EQ(ElementSize(DType::kBFloat16), 2u);
  EXPECT_EQ(ElementSize(DType::kInt64), 8u);
  for (DType d :
       {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt64}) {
    EXPECT_EQ(*ParseDType(DTypeName(d)), d);
  }
  EXPECT_EQ(*ParseDType("bf16"), DType::kBFloat16);
  absl::StatusOr<DType> bad = ParseDType("float8");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("float32"));
}

}  // namespace
}  // namespace distopt
