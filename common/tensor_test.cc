#include "common/tensor.h"

#include <cstring>

#include "common/cpu_backend.h"
#include "common/device.h"
#include "common/half.h"
#include "common/wire_tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

TEST(TensorTest, AllocatesOwnedHostStorage) {
  absl::StatusOr<Tensor> t = Tensor::AllocateHost(DType::kFloat32, {2, 3});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_elements(), 6);
  EXPECT_EQ(t->byte_size(), 24u);
  EXPECT_TRUE(t->owns_storage());
  EXPECT_TRUE(t->device().is_cpu());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data()) % 64, 0u);
  EXPECT_EQ(t->DebugString(), "float32[2, 3] on cpu");
}

TEST(TensorTest, ZeroDimensionalHoldsOneElement) {
  absl::StatusOr<Tensor> t = Tensor::AllocateHost(DType::kInt64, {});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->num_elements(), 1);
  EXPECT_EQ(t->byte_size(), 8u);
}

TEST(TensorTest, CopiesShareStorageAndCloneDoesNot) {
  Tensor a = *Tensor::AllocateHost(DType::kFloat32, {4});
  a.host_span<float>()[0] = 1.5f;
  Tensor shared = a;
  shared.host_span<float>()[0] = 2.5f;
  EXPECT_EQ(a.host_span<float>()[0], 2.5f);
  Tensor clone = *a.CloneTo(CpuBackend());
  clone.host_span<float>()[0] = 9.0f;
  EXPECT_EQ(a.host_span<float>()[0], 2.5f);
}

TEST(TensorTest, BorrowsWithoutOwning) {
  float data[3] = {1, 2, 3};
  Tensor t = Tensor::Borrow(data, DType::kFloat32, {3}, Device::Cpu());
  EXPECT_FALSE(t.owns_storage());
  EXPECT_EQ(t.host_span<float>()[2], 3.0f);
}

TEST(TensorTest, RejectsInvalidShape) {
  EXPECT_EQ(Tensor::AllocateHost(DType::kFloat32, {-1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuBackendTest, FillsEveryDtype) {
  auto backend = CpuBackend();
  Tensor f32 = *Tensor::AllocateHost(DType::kFloat32, {5});
  ASSERT_TRUE(backend->Fill(f32.data(), DType::kFloat32, 5, 0.25).ok());
  for (float v : f32.host_span<float>()) EXPECT_EQ(v, 0.25f);
  Tensor f16 = *Tensor::AllocateHost(DType::kFloat16, {3});
  ASSERT_TRUE(backend->Fill(f16.data(), DType::kFloat16, 3, 0.1).ok());
  for (uint16_t v : f16.host_span<uint16_t>()) EXPECT_EQ(v, FloatToHalf(0.1f));
  Tensor bf16 = *Tensor::AllocateHost(DType::kBFloat16, {3});
  ASSERT_TRUE(backend->Fill(bf16.data(), DType::kBFloat16, 3, -3.0).ok());
  for (uint16_t v : bf16.host_span<uint16_t>()) {
    EXPECT_EQ(BFloat16ToFloat(v), -3.0f);
  }
  Tensor i64 = *Tensor::AllocateHost(DType::kInt64, {2});
  ASSERT_TRUE(backend->Fill(i64.data(), DType::kInt64, 2, 42).ok());
  for (int64_t v : i64.host_span<int64_t>()) EXPECT_EQ(v, 42);
}

TEST(CpuBackendTest, AddsEveryDtype) {
  auto backend = CpuBackend();
  float f32_dst[2] = {1.5f, -2.0f};
  const float f32_src[2] = {0.25f, 2.0f};
  ASSERT_TRUE(backend->Add(f32_dst, f32_src, DType::kFloat32, 2).ok());
  EXPECT_EQ(f32_dst[0], 1.75f);
  EXPECT_EQ(f32_dst[1], 0.0f);
  // fp16: 2048 + 1 is not representable; the fp32 sum rounds to even.
  uint16_t half_dst[1] = {FloatToHalf(2048.0f)};
  const uint16_t half_src[1] = {FloatToHalf(1.0f)};
  ASSERT_TRUE(backend->Add(half_dst, half_src, DType::kFloat16, 1).ok());
  EXPECT_EQ(HalfToFloat(half_dst[0]), 2048.0f);
  uint16_t bf_dst[1] = {FloatToBFloat16(1.0f)};
  const uint16_t bf_src[1] = {FloatToBFloat16(0.5f)};
  ASSERT_TRUE(backend->Add(bf_dst, bf_src, DType::kBFloat16, 1).ok());
  EXPECT_EQ(BFloat16ToFloat(bf_dst[0]), 1.5f);
  int64_t i_dst[1] = {40};
  const int64_t i_src[1] = {2};
  ASSERT_TRUE(backend->Add(i_dst, i_src, DType::kInt64, 1).ok());
  EXPECT_EQ(i_dst[0], 42);
}

TEST(DeviceTest, ParsesAndPrints) {
  EXPECT_EQ(*ParseDevice("cpu"), Device::Cpu());
  EXPECT_EQ(*ParseDevice("cuda"), Device::Cuda(0));
  EXPECT_EQ(*ParseDevice("cuda:3"), Device::Cuda(3));
  EXPECT_EQ(Device::Cuda(3).ToString(), "cuda:3");
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", ""}) {
    absl::StatusOr<Device> d = ParseDevice(bad);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(d.status().message(), HasSubstr("cuda:N"));
  }
}

TEST(WireTensorTest, RoundTripsThroughProto) {
  Tensor t = *Tensor::AllocateHost(DType::kBFloat16, {2, 2});
  for (int i = 0; i < 4; ++i) t.host_span<uint16_t>()[i] = 0x3f80 + i;
  v1::TensorProto proto;
  TensorToProto(t, &proto);
  EXPECT_EQ(proto.dtype(), v1::DTYPE_BFLOAT16);
  absl::StatusOr<Tensor> back = TensorFromProto(proto, "t");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->shape(), t.shape());
  EXPECT_EQ(std::memcmp(back->data(), t.data(), t.byte_size()), 0);
}

TEST(WireTensorTest, RejectsWrongByteLengthNamingTheField) {
  v1::TensorProto proto;
  proto.set_dtype(v1::DTYPE_FLOAT32);
  proto.add_shape(3);
  proto.set_data(std::string(8, '\0'));
  absl::StatusOr<Tensor> t = TensorFromProto(proto, "inputs[0]");
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("inputs[0].data"));
  EXPECT_THAT(t.status().message(), HasSubstr("expected 12"));
  proto.set_dtype(v1::DTYPE_UNSPECIFIED);
  EXPECT_THAT(TensorFromProto(proto, "x").status().message(),
              HasSubstr("x.dtype"));
}

}  // namespace
}  // namespace distopt
