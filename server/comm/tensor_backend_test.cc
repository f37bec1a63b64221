#include "server/comm/tensor_backend.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

RankDevice Cpu(const std::string& host) { return {"cpu", "cpu", host, true}; }
RankDevice Gpu(int index, const std::string& uuid, const std::string& host,
               bool nccl = true) {
  return {"cuda:" + std::to_string(index), uuid, host, nccl};
}

TEST(TensorBackendTest, HostMemoryRanksUseGloo) {
  auto choice = ChooseTensorBackend({Cpu("a"), Cpu("a"), Cpu("b")});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->backend, TensorBackend::kGloo);
  EXPECT_EQ(choice->name, "gloo");
}

TEST(TensorBackendTest, ARankPerGpuUsesNccl) {
  // cuda:0 on two hosts are two GPUs.
  auto choice = ChooseTensorBackend(
      {Gpu(0, "GPU-a", "h1"), Gpu(1, "GPU-b", "h1"), Gpu(0, "GPU-c", "h2")});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->backend, TensorBackend::kNccl);
  EXPECT_EQ(choice->name, "nccl");
}

TEST(TensorBackendTest, RanksSharingAGpuAreStaged) {
  // The same UUID under two indices (CUDA_VISIBLE_DEVICES differs).
  auto choice = ChooseTensorBackend(
      {Gpu(0, "GPU-a", "h1"), Gpu(1, "GPU-b", "h1"), Gpu(3, "GPU-a", "h1")});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->backend, TensorBackend::kStagedGloo);
  EXPECT_EQ(choice->name, "gloo-staged");
  EXPECT_THAT(choice->reason, HasSubstr("ranks 0, 2 share GPU GPU-a on h1"));
  // The same UUID is the same GPU, whatever the host is called.
  auto renamed = ChooseTensorBackend(
      {Gpu(0, "GPU-a", "h1"), Gpu(0, "GPU-a", "h1.cluster")});
  ASSERT_TRUE(renamed.ok()) << renamed.status();
  EXPECT_EQ(renamed->backend, TensorBackend::kStagedGloo);
}

TEST(TensorBackendTest, ARankWithoutNcclMakesTheGroupStaged) {
  auto choice = ChooseTensorBackend(
      {Gpu(0, "GPU-a", "h1"), Gpu(0, "GPU-b", "h2", /*nccl=*/false)});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->backend, TensorBackend::kStagedGloo);
  EXPECT_THAT(choice->reason, HasSubstr("rank 1 built without NCCL"));
}

TEST(TensorBackendTest, AMixedGroupIsRefusedNamingRanksAndDevices) {
  auto choice = ChooseTensorBackend(
      {Cpu("h1"), Gpu(0, "GPU-a", "h1"), Cpu("h2"), Gpu(1, "GPU-b", "h2")});
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(choice.status().message(),
              HasSubstr("ranks 0 (cpu), 2 (cpu) in host memory, ranks 1 "
                        "(cuda:0, GPU-a on h1), 3 (cuda:1, GPU-b on h2) on "
                        "GPUs"));
  EXPECT_THAT(choice.status().message(), HasSubstr("--device=cpu"));
}

TEST(TensorBackendTest, ARankWhoseGpuCannotBeReadIsNamed) {
  RankDevice broken = Gpu(1, std::string(kUnusableDevice) + "no UUID", "h2");
  auto choice = ChooseTensorBackend({Gpu(0, "GPU-a", "h1"), broken});
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(choice.status().message(),
              HasSubstr("rank 1 cannot use its device cuda:1 (no UUID)"));
}

TEST(TensorBackendTest, DescriptionsRoundTripAndBadOnesAreRefused) {
  const RankDevice device = Gpu(2, "GPU-1234", "10.0.0.7", false);
  auto parsed = RankDevice::Parse(device.Serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->device, "cuda:2");
  EXPECT_EQ(parsed->identity, "GPU-1234");
  EXPECT_EQ(parsed->host, "10.0.0.7");
  EXPECT_FALSE(parsed->nccl);
  for (const char* bad : {"", "cpu", "cpu\tcpu\th\t2", "a\tb\tc\td\te"}) {
    EXPECT_EQ(RankDevice::Parse(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace distopt
