// Everything a client can make the daemon hold counts against
// --max_total_bytes (issue 12); here, optimizer state, reserved whole when
// the optimizer is made. Through a real daemon.
#include <string>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

class MemoryBudgetTest : public testing::WorkerTest {
 protected:
  std::vector<std::string> WorkerFlags() const override {
    return {"--max_total_bytes=104857600"};  // 100 MiB.
  }
};

// A 16 MiB parameter and Adam optimizers over it, 32 MiB of state each:
// the third does not fit, and deleting one makes room again.
TEST_F(MemoryBudgetTest, OptimizerStateIsReservedWhenTheOptimizerIsMade) {
  absl::StatusOr<RemoteParameter> w = client_.CreateParameter(
      address_, "w", DType::kFloat32, {4 << 20}, init::Constant(1));
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<uint64_t> made;
  absl::Status refused;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<v1::OptimizerInfo> adam =
        client_.CreateOptimizer(address_, "adam", {}, {w->id});
    if (!adam.ok()) {
      refused = adam.status();
      break;
    }
    made.push_back(adam->id());
  }
  EXPECT_EQ(made.size(), 2u);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), HasSubstr("the optimizer's state"));
  EXPECT_THAT(refused.message(), HasSubstr("--max_total_bytes"));
  ASSERT_FALSE(made.empty());
  ASSERT_TRUE(client_.DeleteOptimizer(address_, made.back()).ok());
  EXPECT_TRUE(client_.CreateOptimizer(address_, "adam", {}, {w->id}).ok());
}

}  // namespace
}  // namespace distopt
