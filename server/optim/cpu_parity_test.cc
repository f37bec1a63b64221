// Every golden case from torch.optim, run by the CPU loops.
#include "gtest/gtest.h"
#include "server/optim/testing/golden_parity.h"

namespace distopt {
namespace {

class CpuParityTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(CpuParityTest, MatchesTorchAfterEveryStep) {
  ExpectMatchesGolden(GetParam(), Device::Cpu());
}

TEST(GoldenFileTest, HasEnoughCases) {
  const std::vector<GoldenCase> cases = LoadGoldenCasesOrFail();
  EXPECT_GE(cases.size(), 48u);
  for (const GoldenCase& c : cases) {
    EXPECT_GE(c.steps.size(), 5u) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, CpuParityTest,
                         ::testing::ValuesIn(LoadGoldenCasesOrFail()),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace distopt
