// Every golden case from torch.optim, run by the fused CUDA kernel on
// cuda:0. Without a GPU every case reports itself skipped.
#include "common/backend.h"
#include "gtest/gtest.h"
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

}  // namespace
}  // namespace distopt
