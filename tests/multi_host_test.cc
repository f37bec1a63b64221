// A data-parallel group of 8 ranks on 4 hosts, on one machine: each host a
// network namespace with its own address on a bridge the test makes and
// removes (tests/virtual_hosts.h), two ranks a host. As far as the daemons
// can tell they are on four machines:
// - post-local SGD's default subgroup is the ranks of one host (2), not the
//   machine's (8) nor loopback's;
// - hierarchical averaging {2 ranks every 2 steps, 8 ranks every 4}
//   averages a host's pair, then the whole group;
// - ZeRO across the hosts steps like one optimizer over the mean gradient;
// - a host whose link is cut while the others wait in a step's collective
//   is named, both its ranks, by every other rank within the timeout;
// - with the links limited (tc tbf), the replicated and gradient-sharded
//   steps' times, reported.
// Needs root (CAP_NET_ADMIN); skipped, saying so, without it. Bazel runs
// it unsandboxed (tags "local").
#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/group_calls.h"
#include "tests/local_sgd_fixture.h"
#include "tests/virtual_hosts.h"

namespace distopt {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kHosts = 4;
constexpr int kRanksPerHost = 2;
constexpr int kWorld = kHosts * kRanksPerHost;

class MultiHostTest : public LocalSgdTest {
 protected:
  void SetUp() override {
    std::string why_not;
    if (!testing::VirtualHosts::Possible(&why_not)) GTEST_SKIP() << why_not;
    absl::StatusOr<std::unique_ptr<testing::VirtualHosts>> hosts =
        testing::VirtualHosts::Create(kHosts);
    ASSERT_TRUE(hosts.ok()) << hosts.status();
    hosts_ = *std::move(hosts);
    StartRanks(kWorld);
  }
  void TearDown() override {
    StopRanks();
    hosts_.reset();
  }

  static int HostOf(int rank) { return rank / kRanksPerHost; }

  std::vector<std::string> RankFlags(int r, int world) const override {
    std::vector<std::string> flags = LocalSgdTest::RankFlags(r, world);
    flags.push_back(
        absl::StrCat("--listen=", hosts_->Address(HostOf(r)), ":0"));
    return flags;
  }
  std::vector<std::string> RankLauncher(int r) const override {
    return hosts_->Launcher(HostOf(r));
  }

  std::unique_ptr<testing::VirtualHosts> hosts_;
};

TEST_F(MultiHostTest, RanksAreOnTheirHosts) {
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(addresses_[r].substr(0, addresses_[r].rfind(':')),
              hosts_->Address(HostOf(r)));
    v1::GroupInfo group;
    EXPECT_TRUE(testing::PollUntil(
        [&] {
          group = testing::GetGroup(*client_, addresses_[r]);
          return group.state() == v1::GroupInfo::READY;
        },
        absl::Seconds(30)))
        << "rank " << r << ": " << group.ShortDebugString();
    EXPECT_EQ(group.rank(), r);
    EXPECT_EQ(group.world_size(), kWorld);
  }
}

TEST_F(MultiHostTest, DefaultSubgroupsAreTheRanksOfEachHost) {
  v1::CreatePostLocalSgdRequest spec = Spec(0.0, 2);
  spec.set_no_post_local_gradient_allreduce(false);
  spec.set_subgroup_size(0);  // Torch's default: the ranks of this host.
  std::vector<v1::PostLocalSgdInfo> infos;
  ASSERT_TRUE(CreateOnEveryRank(spec, &infos).ok());
  // After the warm-up (2 steps, gradients reduced over the whole group)
  // and the averaging of step 2, gradients reduce within each host.
  for (int step = 0; step < 4; ++step) StepEveryRank(step);
  v1::PostLocalSgdInfo info;
  ASSERT_TRUE(LocalSgdCall(5, &v1::LocalSgdService::Stub::GetPostLocalSgd,
                           v1::GetPostLocalSgdRequest(), &info)
                  .ok());
  EXPECT_EQ(info.next_gradient_group_size(), kRanksPerHost);
  // Step 3 (no averaging) reduced each host's pair only: a host's ranks
  // hold the same model, other hosts' ranks another.
  std::vector<std::vector<Tensor>> models;
  for (int r = 0; r < kWorld; ++r) models.push_back(ReadModel(r));
  for (int r = 0; r < kWorld; ++r) {
    for (int other = 0; other < kWorld; ++other) {
      EXPECT_EQ(testing::SameBytes(models[r][0], models[other][0]),
                HostOf(r) == HostOf(other))
          << "ranks " << r << " and " << other;
    }
  }
}

TEST_F(MultiHostTest, HierarchicalAveragingPairsThenTheWholeGroup) {
  v1::CreatePostLocalSgdRequest spec = Spec(0.0, 0);
  for (auto [period, size] :
       {std::pair<int, int>{2, kRanksPerHost}, {4, kWorld}}) {
    v1::AveragerPeriod* entry = spec.mutable_hierarchical()->add_periods();
    entry->set_period(period);
    entry->set_group_size(size);
  }
  std::vector<v1::PostLocalSgdInfo> infos;
  ASSERT_TRUE(CreateOnEveryRank(spec, &infos).ok());
  // Steps 0 (all), 1 (none), 2 (each host's pair), 3 (none), 4 (all).
  const std::vector<int> sizes = {kWorld, 0, kRanksPerHost, 0, kWorld};
  for (int step = 0; step < 5; ++step) {
    EXPECT_THAT(StepEveryRank(step), Each(sizes[step])) << "step " << step;
    std::vector<std::vector<Tensor>> models;
    for (int r = 0; r < kWorld; ++r) models.push_back(ReadModel(r));
    for (int r = 0; r < kWorld; ++r) {
      for (int other = 0; other < kWorld; ++other) {
        const bool together =
            r == other || sizes[step] == kWorld ||
            (sizes[step] == kRanksPerHost && HostOf(r) == HostOf(other));
        EXPECT_EQ(testing::SameBytes(models[r][0], models[other][0]), together)
            << "step " << step << ", ranks " << r << " and " << other;
      }
    }
  }
}

TEST_F(MultiHostTest, ZeroAcrossHostsStepsAsOneOptimizer) {
  ASSERT_TRUE(CreateZeroOnEveryRank(Spec("adam", kLr)));
  ReferenceTraining reference("adam");
  ASSERT_TRUE(TrainSteps(reference, 0, 3));
  // Every rank holds the same bits; they equal the reference's within
  // fp32 summation order (8 gradients summed in another order).
  const std::vector<Tensor> rank0 = ReadModel(0);
  for (int r = 1; r < kWorld; ++r) {
    const std::vector<Tensor> model = ReadModel(r);
    for (size_t p = 0; p < kModel.size(); ++p) {
      EXPECT_TRUE(testing::SameBytes(model[p], rank0[p]))
          << "rank " << r << " " << kModel[p].first;
    }
  }
  for (size_t p = 0; p < kModel.size(); ++p) {
    const auto got = rank0[p].host_span<float>();
    const auto want = reference.values()[p].host_span<float>();
    for (size_t e = 0; e < got.size(); ++e) {
      ASSERT_NEAR(got[e], want[e], 1e-5f * (1 + std::abs(want[e])))
          << kModel[p].first << "[" << e << "]";
    }
  }
}

TEST_F(MultiHostTest, AHostCutOffMidStepIsNamedByEveryOtherRank) {
  v1::CreateZeroRequest spec = SgdSpec(kLr);
  constexpr int64_t kTimeoutMs = 4000;
  spec.set_timeout_ms(kTimeoutMs);
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  const uint64_t context_id = PushGradients(0);
  // The ranks of hosts 0 to 2 start the step and wait in its collectives
  // for host 3's, whose link is cut before they come.
  constexpr int kCut = kHosts - 1;
  std::vector<grpc::Status> statuses(kWorld);
  std::vector<std::thread> callers;
  const absl::Time start = absl::Now();
  for (int r = 0; r < kWorld; ++r) {
    if (HostOf(r) == kCut) continue;
    callers.emplace_back([&, r] { statuses[r] = Step(r, context_id); });
  }
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_TRUE(hosts_->SetLink(kCut, false).ok());
  for (std::thread& caller : callers) caller.join();
  const absl::Duration took = absl::Now() - start;
  std::printf("the survivors' step failed after %s\n",
              absl::FormatDuration(took).c_str());
  // Within the collective's timeout, and the time to ask who answers.
  EXPECT_LT(took, absl::Milliseconds(kTimeoutMs) + absl::Seconds(10));
  const std::string lost = absl::StrCat("lost: rank 6 (", addresses_[6],
                                        "), rank 7 (", addresses_[7], ")");
  for (int r = 0; r < kWorld; ++r) {
    if (HostOf(r) == kCut) continue;
    EXPECT_FALSE(statuses[r].ok()) << "rank " << r;
    EXPECT_THAT(statuses[r].error_message(), HasSubstr(lost)) << "rank " << r;
    const v1::GroupInfo group = testing::GetGroup(*client_, addresses_[r]);
    EXPECT_THAT(group.lost_ranks(), ElementsAre(6, 7)) << "rank " << r;
  }
  // The cut host's ranks are still there, alone: stop them with the rest.
  ASSERT_TRUE(hosts_->SetLink(kCut, true).ok());
}

// Links limited to 200 Mbit/s a host (tc tbf): the step of a 4 MiB Adam
// model, replicated (an all-reduce, then the updated shards broadcast:
// 3(W-1)/W of the model's bytes a rank) and gradient-sharded (2(W-1)/W),
// reported side by side; the median of 3 timed steps after one untimed.
// Checked: the limit holds the step back at least as long as the ring's
// cross-host bytes need at that rate (half of a host's sends cross to the
// next host: 2(W-1)/W x 4 MiB in the all-reduce alone). Measured here on
// 2 shared cores: 1.31-1.33 s replicated, 1.19-1.20 s sharded (0.89-0.91;
// unlimited: 0.067 s and 0.056 s): at this size the sharded step's third
// fewer bytes buy about a tenth, its ring's 7 steps a rank paying the
// queue's latency each.
TEST_F(MultiHostTest, StepTimesUnderLimitedLinks) {
  constexpr int kMegabits = 200;
  constexpr int64_t kElements = 1 << 20;
  double seconds[2] = {0, 0};
  for (const bool sharded : {false, true}) {
    if (sharded) {
      StopRanks();
      StartRanks(kWorld);
    }
    std::vector<RemoteParameter> big;
    for (int r = 0; r < kWorld; ++r) {
      absl::StatusOr<RemoteParameter> param = client_->CreateParameterFrom(
          addresses_[r], "big", testing::Ramp({kElements}, -1.0f, 1e-6f));
      ASSERT_TRUE(param.ok()) << param.status();
      big.push_back(*param);
    }
    v1::CreateZeroRequest spec = Spec("adam", kLr);
    spec.mutable_groups(0)->clear_parameter_names();
    spec.mutable_groups(0)->add_parameter_names("big");
    spec.set_gradient_sharded(sharded);
    ASSERT_TRUE(CreateZeroOnEveryRank(spec));
    for (int h = 0; h < kHosts; ++h) {
      ASSERT_TRUE(hosts_->LimitBandwidth(h, kMegabits).ok());
    }
    std::vector<double> steps;
    for (int step = 0; step < 4; ++step) {
      const uint64_t context_id = client_->NewContextId();
      for (int r = 0; r < kWorld; ++r) {
        ASSERT_TRUE(
            client_
                ->AccumulateGradients(
                    addresses_[r], context_id,
                    {{big[r].id,
                      testing::Ramp({kElements}, 0.001f * (r + 1), 1e-7f)}})
                .ok());
      }
      const absl::Time start = absl::Now();
      ASSERT_TRUE(OkOnEveryRank([&](int r) { return Step(r, context_id); }));
      if (step > 0) steps.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
    std::sort(steps.begin(), steps.end());
    seconds[sharded] = steps[steps.size() / 2];
    for (int h = 0; h < kHosts; ++h) {
      ASSERT_TRUE(hosts_->LimitBandwidth(h, 0).ok());
    }
  }
  std::printf(
      "links at %d Mbit/s, 4 MiB Adam on 8 ranks: step %.3f s replicated, "
      "%.3f s gradient-sharded (%.2f)\n",
      kMegabits, seconds[0], seconds[1], seconds[1] / seconds[0]);
  const double ring_bytes = 2.0 * (kWorld - 1) / kWorld * kElements * 4;
  const double at_rate = ring_bytes / (kMegabits * 1e6 / 8);
  EXPECT_GT(seconds[0], at_rate) << "the links were not limited";
  EXPECT_GT(seconds[1], at_rate) << "the links were not limited";
}

}  // namespace
}  // namespace distopt
