// Every golden case from torch.optim, run by the fused CUDA kernel on
// cuda:0, and a parameter stepped slice by slice there. Without a GPU every
// case reports itself skipped.
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/backend.h"
#include "common/cpu_backend.h"
#include "common/half.h"
#include "gtest/gtest.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/registry.h"
#include "server/optim/testing/golden_parity.h"

namespace distopt {
namespace {

class CudaParityTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(CudaParityTest, MatchesTorchAfterEveryStep) {
  absl::StatusOr<std::shared_ptr<Backend>> gpu = GetBackend(Device::Cuda(0));
  if (!gpu.ok()) GTEST_SKIP() << "no CUDA GPU: " << gpu.status().message();
  ExpectMatchesGolden(GetParam(), Device::Cuda(0));
}

INSTANTIATE_TEST_SUITE_P(Golden, CudaParityTest,
                         ::testing::ValuesIn(LoadGoldenCasesOrFail()),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           return info.param.name;
                         });

// Slices stepped in turn (FunctionalOptimizer::StepSlice, as a gradient-
// sharded ZeRO step on a GPU takes a parameter cut across buckets) end bit
// for bit where whole steps take the parameter on the GPU: the kernel's
// pointers are offset by the slice's first element, in fp32 and bf16
// (2-byte elements), for the state too.
TEST(CudaStepSliceTest, SlicesInTurnStepAsOneStep) {
  absl::StatusOr<std::shared_ptr<Backend>> gpu = GetBackend(Device::Cuda(0));
  if (!gpu.ok()) GTEST_SKIP() << "no CUDA GPU: " << gpu.status().message();
  auto registry = OptimizerRegistry::WithBuiltins();
  constexpr int64_t n = 200003;
  const std::vector<std::pair<int64_t, int64_t>> slices = {
      {0, 3}, {3, 70001}, {70004, 129999}};
  for (const char* kind : {"adam", "sgd", "rprop"}) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      SCOPED_TRACE(absl::StrCat(kind, " ", DTypeName(dtype)));
      absl::flat_hash_map<std::string, HyperValue> h = {{"lr", 0.01}};
      if (std::string(kind) == "sgd") {
        h["momentum"] = 0.9;
        h["dampening"] = 0.3;
      }
      auto whole = *FunctionalOptimizer::Create(
          *registry->Find(kind), h, {{dtype, {n}}}, Device::Cuda(0));
      auto sliced = *FunctionalOptimizer::Create(
          *registry->Find(kind), h, {{dtype, {n}}}, Device::Cuda(0));
      std::vector<float> start(n);
      for (int64_t i = 0; i < n; ++i) start[i] = std::sin(1.0f + i);
      Tensor host = *Tensor::AllocateHost(dtype, {n});
      NarrowFromFloat(start, dtype, host.data());
      Tensor a = *host.CloneTo(*gpu);
      Tensor b = *host.CloneTo(*gpu);
      for (int step = 0; step < 3; ++step) {
        std::vector<float> values(n);
        for (int64_t i = 0; i < n; ++i) values[i] = std::cos(0.7f * i + step);
        NarrowFromFloat(values, dtype, host.data());
        Tensor g = *host.CloneTo(*gpu);
        Tensor* params[] = {&a};
        const Tensor* grads[] = {&g};
        ASSERT_TRUE(whole->Step(params, grads).ok());
        for (const auto& [begin, count] : slices) {
          Tensor slice = Tensor::Borrow(
              static_cast<char*>(g.data()) + begin * ElementSize(dtype), dtype,
              {count}, Device::Cuda(0));
          absl::Status status = sliced->StepSlice(0, b, begin, slice);
          ASSERT_TRUE(status.ok()) << status;
        }
      }
      const Tensor x = *a.CloneTo(CpuBackend());
      const Tensor y = *b.CloneTo(CpuBackend());
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.byte_size()), 0);
      EXPECT_EQ(sliced->state(0).step, whole->state(0).step);
    }
  }
}

}  // namespace
}  // namespace distopt
