// Runs on a machine with a GPU; elsewhere every test reports itself skipped.
#include "common/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/cuda_ops.h"
#include "common/half.h"
#include "common/tensor.h"
#include "common/testing/another_stream_held.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

bool GpuPresent() {
  int count = 0;
  return cuda_ops::BuiltWithCuda() && cuda_ops::DeviceCount(&count).empty() &&
         count > 0;
}

TEST(CudaBackendTest, WithoutGpuReportsAClearError) {
  if (GpuPresent()) GTEST_SKIP() << "a GPU is present";
  absl::StatusOr<std::shared_ptr<Backend>> backend =
      GetBackend(Device::Cuda(0));
  ASSERT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(backend.status().message(), HasSubstr("cuda:0"));
  EXPECT_THAT(backend.status().message(), HasSubstr("--device=cpu"));
}

TEST(CudaBackendTest, IndexOutOfRangeIsRejected) {
  if (!GpuPresent()) GTEST_SKIP() << "no CUDA GPU on this machine";
  EXPECT_EQ(GetBackend(Device::Cuda(1000)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CudaBackendTest, AllocatesCopiesAndFills) {
  if (!GpuPresent()) GTEST_SKIP() << "no CUDA GPU on this machine";
  std::shared_ptr<Backend> gpu = *GetBackend(Device::Cuda(0));
  constexpr int kCount = 1000003;  // Odd, larger than one fill block.
  absl::StatusOr<Tensor> t = Tensor::Allocate(gpu, DType::kFloat16, {kCount});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->device().is_cuda());
  ASSERT_TRUE(gpu->Fill(t->data(), DType::kFloat16, kCount, 0.1).ok());
  std::vector<uint16_t> host(kCount);
  ASSERT_TRUE(gpu->CopyToHost(host.data(), t->data(), t->byte_size()).ok());
  for (uint16_t v : host) ASSERT_EQ(v, FloatToHalf(0.1f));

  for (int i = 0; i < kCount; ++i) host[i] = static_cast<uint16_t>(i * 7);
  ASSERT_TRUE(gpu->CopyFromHost(t->data(), host.data(), t->byte_size()).ok());
  absl::StatusOr<Tensor> copy = t->CloneTo(gpu);
  ASSERT_TRUE(copy.ok());
  absl::StatusOr<Tensor> back = copy->CloneTo(*GetBackend(Device::Cpu()));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::memcmp(back->data(), host.data(), t->byte_size()), 0);
}

// Copies, fills, conversions and adds wait for the calling thread's own
// stream, not the device (common/cuda_ops.h): with another stream held, as
// NCCL's is while a collective is in flight, they still return, complete.
TEST(CudaBackendTest, OperationsWaitForTheirOwnStreamOnly) {
  if (!GpuPresent()) GTEST_SKIP() << "no CUDA GPU on this machine";
  std::shared_ptr<Backend> gpu = *GetBackend(Device::Cuda(0));
  constexpr int kCount = 4099;
  // Allocated before the gate: cudaFree may wait for the whole device.
  absl::StatusOr<Tensor> wide =
      Tensor::Allocate(gpu, DType::kFloat32, {kCount});
  absl::StatusOr<Tensor> sum = Tensor::Allocate(gpu, DType::kFloat32, {kCount});
  absl::StatusOr<Tensor> narrow =
      Tensor::Allocate(gpu, DType::kFloat16, {kCount});
  ASSERT_TRUE(wide.ok() && sum.ok() && narrow.ok());
  std::vector<float> host(kCount);
  for (int i = 0; i < kCount; ++i) host[i] = 0.25f * (i % 8);
  std::vector<uint16_t> back(kCount);

  absl::Status status;
  auto operations = [&] {
    const size_t bytes = kCount * sizeof(float);
    status = gpu->Fill(sum->data(), DType::kFloat32, kCount, 1.0);
    if (status.ok()) {
      status = gpu->CopyFromHost(wide->data(), host.data(), bytes);
    }
    if (status.ok()) {
      status = gpu->Add(sum->data(), wide->data(), DType::kFloat32, kCount);
    }
    if (status.ok()) {
      status = gpu->CopyWithinDevice(wide->data(), sum->data(), bytes);
    }
    if (status.ok()) {
      status = gpu->Convert(narrow->data(), DType::kFloat16, wide->data(),
                            DType::kFloat32, kCount);
    }
    if (status.ok()) {
      status = gpu->CopyToHost(back.data(), narrow->data(), kCount * 2);
    }
  };
  // Once before the gate: CUDA loads a kernel on its first launch (lazy
  // loading, the default since CUDA 12.2), which may wait for the device.
  operations();
  ASSERT_TRUE(status.ok()) << status;
  std::fill(back.begin(), back.end(), 0);
  const absl::StatusOr<bool> in_time = testing::ReturnsWhileAnotherStreamIsHeld(
      0, absl::Seconds(30), operations);
  ASSERT_TRUE(in_time.ok()) << in_time.status();
  EXPECT_TRUE(*in_time) << "an operation waited for a stream it does not use";
  ASSERT_TRUE(status.ok()) << status;
  for (int i = 0; i < kCount; ++i) {
    ASSERT_EQ(back[i], FloatToHalf(1.0f + host[i])) << "element " << i;
  }
}

}  // namespace
}  // namespace distopt
