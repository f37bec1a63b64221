// ZeroService across real daemons: ranks joined through rank 0's store
// hold the same model, each pushes its own gradients, and ZeRO steps on
// every rank leave identical parameters, equal bit for bit to one local
// optimizer fed the averaged gradients, with the optimizer state split
// between the ranks.
#include <signal.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/zero.grpc.pb.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/registry.h"
#include "tests/worker_fixture.h"
#include "tests/zero_fixture.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

// (optimizer kind, world size).
class ZeroTrainingTest
    : public ZeroServiceTest,
      public ::testing::WithParamInterface<std::tuple<std::string, int>> {
 protected:
  void SetUp() override { StartRanks(std::get<1>(GetParam())); }
};

TEST_P(ZeroTrainingTest, TenStepsEqualOneLocalOptimizerBitForBit) {
  const std::string kind = std::get<0>(GetParam());
  std::vector<v1::ZeroInfo> infos;
  ASSERT_TRUE(CreateZeroOnEveryRank(Spec(kind, kLr), &infos));
  // Every parameter has one owner and every rank owns some.
  ASSERT_EQ(infos[0].owners_size(), static_cast<int>(kModel.size()));
  std::set<int> owners;
  for (const v1::ZeroParameterOwner& owner : infos[0].owners()) {
    owners.insert(owner.rank());
  }
  EXPECT_EQ(static_cast<int>(owners.size()), world_);

  ReferenceTraining reference(kind);
  constexpr int kSteps = 10;
  ASSERT_TRUE(TrainSteps(reference, 0, kSteps));
  ExpectEveryRankHolds(reference.values());
  // Each rank holds the state of its own partition only: within one
  // parameter's state of total/W, and one copy of it in all.
  int64_t total_state = 0, largest = 0, model_bytes = 0;
  for (const Tensor& values : reference.values()) {
    model_bytes += values.byte_size();
  }
  for (size_t p = 0; p < kModel.size(); ++p) {
    int64_t bytes = 0;
    for (const auto& [name, buffer] : reference.optimizer().state(p).buffers) {
      bytes += buffer.byte_size();
    }
    total_state += bytes;
    largest = std::max(largest, bytes);
  }
  int64_t sum_state = 0;
  for (int r = 0; r < world_; ++r) {
    auto stub = v1::ZeroService::NewStub(client_->Channel(addresses_[r]));
    grpc::ClientContext context;
    v1::ZeroInfo after;
    ASSERT_TRUE(stub->GetZero(&context, v1::GetZeroRequest(), &after).ok());
    EXPECT_EQ(after.steps(), kSteps);
    EXPECT_EQ(after.parameter_bytes(), model_bytes);
    EXPECT_EQ(after.gradient_bytes(), model_bytes);
    EXPECT_LE(std::abs(after.state_bytes() - total_state / world_), largest)
        << "rank " << r;
    sum_state += after.state_bytes();
    // Every rank's figures, from any rank, equal what each reports itself.
    ASSERT_EQ(after.ranks_size(), world_);
    for (int q = 0; q < world_; ++q) {
      EXPECT_EQ(after.ranks(q).rank(), q);
      EXPECT_EQ(after.ranks(q).parameter_bytes(), model_bytes);
      EXPECT_EQ(after.ranks(q).steps(), kSteps);
    }
    EXPECT_EQ(after.ranks(r).state_bytes(), after.state_bytes());
    // The step's scratch, that GetZero reports for every rank: one
    // gradient bucket, here the whole (small) model's, and the bucket its
    // small parameters are broadcast in, at most the model's too.
    EXPECT_GT(after.scratch_bytes(), 0);
    EXPECT_LE(after.scratch_bytes(), 2 * model_bytes);
    EXPECT_EQ(after.ranks(r).scratch_bytes(), after.scratch_bytes());
    int64_t from_one_call = 0;
    for (const v1::ZeroRankBytes& rank : after.ranks()) {
      from_one_call += rank.state_bytes();
    }
    EXPECT_EQ(from_one_call, total_state);
  }
  EXPECT_EQ(sum_state, total_state);
}

INSTANTIATE_TEST_SUITE_P(KindsAndWorlds, ZeroTrainingTest,
                         ::testing::Combine(::testing::Values("sgd", "adam"),
                                            ::testing::Values(2, 3)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param),
                                               "_world",
                                               std::get<1>(info.param));
                         });

TEST_F(ZeroServiceTest, StepBeforeCreateAndMismatchedSpecsAreRefused) {
  grpc::Status early = Step(0, client_->NewContextId());
  // The context does not exist yet either; whichever is reported, it is a
  // refusal that names what is wrong, not a hang on the other rank.
  EXPECT_NE(early.error_code(), grpc::StatusCode::OK);
  std::vector<v1::ZeroInfo> infos(world_);
  std::vector<grpc::Status> created = OnEveryRank([&](int r) {
    return CreateZero(r, SgdSpec(r == 0 ? kLr : 2 * kLr), &infos[r]);
  });
  for (int r = 0; r < world_; ++r) {
    EXPECT_EQ(created[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << r << ": " << created[r].error_message();
  }
  // A request that one rank refuses on its own checks (an unknown name, a
  // name given twice, a bad bucket size): that rank says why, and the
  // others learn of it at once instead of waiting in a collective until
  // their timeout.
  v1::CreateZeroRequest unknown = SgdSpec(kLr);
  unknown.mutable_groups(0)->add_parameter_names("fc3.weight");
  v1::CreateZeroRequest twice = SgdSpec(kLr);
  twice.mutable_groups(0)->add_parameter_names("fc1.bias");
  v1::CreateZeroRequest odd_bucket = SgdSpec(kLr);
  odd_bucket.set_bucket_bytes(1);
  const std::vector<
      std::tuple<const v1::CreateZeroRequest*, grpc::StatusCode, std::string>>
      refusals = {
          {&unknown, grpc::StatusCode::NOT_FOUND, "fc3.weight"},
          {&twice, grpc::StatusCode::INVALID_ARGUMENT, "\"fc1.bias\" is named"},
          {&odd_bucket, grpc::StatusCode::INVALID_ARGUMENT, "bucket_bytes"}};
  for (const auto& [bad, code, why] : refusals) {
    const absl::Time start = absl::Now();
    created = OnEveryRank([&, bad = bad](int r) {
      return CreateZero(r, r == 1 ? *bad : SgdSpec(kLr), &infos[r]);
    });
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << why;
    EXPECT_EQ(created[1].error_code(), code) << created[1].error_message();
    EXPECT_THAT(created[1].error_message(), HasSubstr(why));
    for (int r = 0; r < world_; ++r) {
      if (r == 1) continue;
      EXPECT_EQ(created[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
          << r << ": " << created[r].error_message();
      EXPECT_THAT(created[r].error_message(), HasSubstr("rank 1 refused"));
    }
  }
  EXPECT_TRUE(CreateZeroOnEveryRank(SgdSpec(kLr)));
}

// Calls that one rank refuses on its own checks while the others go
// ahead: the refusing rank says why, and the others learn of it in the
// call's first collective, at once, instead of waiting for that rank until
// their timeout (30 s here); nothing changes anywhere, and the group goes
// on.
TEST_F(ZeroServiceTest, ARefusalOnOneRankReachesTheOthersAtOnce) {
  ASSERT_TRUE(CreateZeroOnEveryRank(SgdSpec(kLr)));
  const auto expect_refused_by_rank_1 =
      [&](const std::vector<grpc::Status>& results, grpc::StatusCode code,
          const std::string& why, absl::Time start) {
        EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << why;
        EXPECT_EQ(results[1].error_code(), code) << results[1].error_message();
        EXPECT_THAT(results[1].error_message(), HasSubstr(why));
        for (int r = 0; r < world_; ++r) {
          if (r == 1) continue;
          EXPECT_EQ(results[r].error_code(),
                    grpc::StatusCode::FAILED_PRECONDITION)
              << r << ": " << results[r].error_message();
          EXPECT_THAT(results[r].error_message(), HasSubstr("rank 1 refused"));
        }
      };
  // A step in a context that rank 1 never heard of (a typo, or one that
  // died with a restarted daemon).
  const uint64_t context_id = PushGradients(0);
  const uint64_t unknown = client_->NewContextId();
  absl::Time start = absl::Now();
  expect_refused_by_rank_1(OnEveryRank([&](int r) {
                             return Step(r, r == 1 ? unknown : context_id);
                           }),
                           grpc::StatusCode::NOT_FOUND, absl::StrCat(unknown),
                           start);
  for (int r = 0; r < world_; ++r) {
    for (size_t p = 0; p < kModel.size(); ++p) {
      absl::StatusOr<Tensor> now = client_->ReadParameter(params_[r][p]);
      ASSERT_TRUE(now.ok()) << now.status();
      EXPECT_TRUE(testing::SameBytes(*now, Initial(p))) << r << " " << p;
    }
  }
  // A group index that only rank 1 has wrong.
  std::vector<v1::ZeroInfo> infos(world_);
  start = absl::Now();
  const std::vector<grpc::Status> changed = OnEveryRank([&](int r) {
    v1::SetZeroHyperparametersRequest request;
    request.set_group(r == 1 ? 9 : 0);
    (*request.mutable_hyperparameters())["lr"].set_number(kLr / 2);
    return Call(r, &v1::ZeroService::Stub::SetHyperparameters, request,
                &infos[r]);
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (int r = 0; r < world_; ++r) {
    EXPECT_EQ(changed[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << r << ": " << changed[r].error_message();
  }
  // A group that rank 1 cannot make: a parameter it does not hold.
  for (int r = 0; r < world_; ++r) {
    ASSERT_TRUE(
        client_->CreateParameterFrom(addresses_[r], "fc3.bias", Initial(3))
            .ok());
  }
  start = absl::Now();
  expect_refused_by_rank_1(
      OnEveryRank([&](int r) {
        v1::AddZeroParamGroupRequest request;
        request.mutable_group()->add_parameter_names(r == 1 ? "fc4.bias"
                                                            : "fc3.bias");
        return Call(r, &v1::ZeroService::Stub::AddParamGroup, request,
                    &infos[r]);
      }),
      grpc::StatusCode::NOT_FOUND, "fc4.bias", start);
  // None of it stuck: the same step on every rank equals one local
  // optimizer's with the learning rate it was created with.
  ReferenceTraining reference("sgd");
  ASSERT_TRUE(TrainSteps(reference, 0, 1));
  ExpectEveryRankHolds(reference.values());
  for (int r = 0; r < world_; ++r) {
    v1::ZeroInfo info;
    ASSERT_TRUE(
        Call(r, &v1::ZeroService::Stub::GetZero, v1::GetZeroRequest(), &info)
            .ok());
    EXPECT_EQ(info.groups(), 1);
    EXPECT_EQ(info.steps(), 1);
  }
}

// What the ranks must agree on, to the last bit: a learning rate that
// differs in its seventh digit, and parameters of the same dtypes and
// shapes named in another order (each rank would step the others' moments
// and gradients into its own parameters).
TEST_F(ZeroServiceTest, NearlyTheSameSpecsAreRefusedToo) {
  std::vector<v1::ZeroInfo> infos(world_);
  std::vector<grpc::Status> created = OnEveryRank([&](int r) {
    return CreateZero(r, SgdSpec(r == 0 ? kLr : kLr * (1 + 1e-7)), &infos[r]);
  });
  for (int r = 0; r < world_; ++r) {
    EXPECT_EQ(created[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << r << ": " << created[r].error_message();
    EXPECT_THAT(created[r].error_message(), HasSubstr("hyperparameters"));
  }
  for (int r = 0; r < world_; ++r) {
    ASSERT_TRUE(
        client_->CreateParameterFrom(addresses_[r], "fc3.bias", Initial(3))
            .ok());
  }
  created = OnEveryRank([&](int r) {
    v1::CreateZeroRequest spec = SgdSpec(kLr);
    spec.mutable_groups(0)->add_parameter_names("fc3.bias");
    if (r == 1) {  // fc2.bias and fc3.bias swapped: both float32[4].
      spec.mutable_groups(0)->mutable_parameter_names()->SwapElements(3, 4);
    }
    return CreateZero(r, spec, &infos[r]);
  });
  for (int r = 0; r < world_; ++r) {
    EXPECT_EQ(created[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << r << ": " << created[r].error_message();
    EXPECT_THAT(created[r].error_message(), HasSubstr("names"));
  }
  // The same specification is still made.
  EXPECT_TRUE(CreateZeroOnEveryRank(SgdSpec(kLr)));
}

TEST_F(ZeroServiceTest, RanksWithDifferentGradientsAverageWithZeros) {
  ASSERT_TRUE(CreateZeroOnEveryRank(SgdSpec(kLr)));
  // Rank 0 has a gradient for every parameter but the last; rank 1 only
  // for the first. The last has none anywhere and is left as it was.
  const uint64_t context_id = client_->NewContextId();
  for (int r = 0; r < world_; ++r) {
    const size_t count = r == 0 ? kModel.size() - 1 : 1;
    std::vector<std::pair<uint64_t, Tensor>> gradients;
    for (size_t p = 0; p < count; ++p) {
      gradients.emplace_back(params_[r][p].id, RankGradient(r, p, 0));
    }
    ASSERT_TRUE(
        client_->AccumulateGradients(addresses_[r], context_id, gradients)
            .ok());
  }
  ASSERT_TRUE(OkOnEveryRank([&](int r) { return Step(r, context_id); }));
  auto registry = OptimizerRegistry::WithBuiltins();
  std::vector<ParameterLayout> layouts;
  std::vector<Tensor> reference, averaged;
  std::vector<Tensor*> params;
  std::vector<const Tensor*> grads;
  for (size_t p = 0; p < kModel.size(); ++p) {
    layouts.push_back({DType::kFloat32, kModel[p].second});
    reference.push_back(Initial(p));
    Tensor average = RankGradient(0, p, 0);
    if (p == 0) {
      Tensor other = RankGradient(1, p, 0);
      for (int64_t e = 0; e < average.num_elements(); ++e) {
        average.host_span<float>()[e] += other.host_span<float>()[e];
      }
    }
    for (float& x : average.host_span<float>()) x *= 0.5f;
    averaged.push_back(std::move(average));
  }
  for (size_t p = 0; p < kModel.size(); ++p) {
    params.push_back(&reference[p]);
    grads.push_back(p + 1 < kModel.size() ? &averaged[p] : nullptr);
  }
  std::unique_ptr<FunctionalOptimizer> local = *FunctionalOptimizer::Create(
      *registry->Find("sgd"), Hyperparameters("sgd", kLr), layouts);
  ASSERT_TRUE(local->Step(params, grads).ok());
  ExpectEveryRankHolds(reference);
}

TEST_F(ZeroServiceTest, AKilledRankFailsTheSurvivorsStepWithoutChangingIt) {
  v1::CreateZeroRequest spec = SgdSpec(kLr);
  spec.set_timeout_ms(5000);
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  std::vector<Tensor> before;
  for (size_t p = 0; p < kModel.size(); ++p) {
    absl::StatusOr<Tensor> values = client_->ReadParameter(params_[0][p]);
    ASSERT_TRUE(values.ok());
    before.push_back(*std::move(values));
  }
  ranks_[1]->Signal(SIGKILL);
  ASSERT_TRUE(ranks_[1]->Wait(absl::Seconds(10)).ok());
  const uint64_t context_id = client_->NewContextId();
  std::vector<std::pair<uint64_t, Tensor>> gradients;
  for (size_t p = 0; p < kModel.size(); ++p) {
    gradients.emplace_back(params_[0][p].id, RankGradient(0, p, 0));
  }
  ASSERT_TRUE(
      client_->AccumulateGradients(addresses_[0], context_id, gradients).ok());
  // The survivor's step fails (no hang past the timeout) before it changes
  // anything: the gradients are averaged before any rank steps.
  grpc::Status stepped = Step(0, context_id);
  EXPECT_EQ(stepped.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(stepped.error_message(),
              HasSubstr("lost: rank 1 (" + addresses_[1] + ")"));
  for (size_t p = 0; p < kModel.size(); ++p) {
    absl::StatusOr<Tensor> values = client_->ReadParameter(params_[0][p]);
    ASSERT_TRUE(values.ok());
    EXPECT_TRUE(testing::SameBytes(*values, before[p])) << kModel[p].first;
  }
}

// Rank 0 holds the group's store: with it gone, the survivor's step still
// fails within its timeout (and a few seconds), not after a wait on the
// dead store for every rank it looks up.
TEST_F(ZeroServiceTest, AKilledRankZeroFailsTheSurvivorsStepInItsTimeout) {
  v1::CreateZeroRequest spec = SgdSpec(kLr);
  spec.set_timeout_ms(5000);
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  ranks_[0]->Signal(SIGKILL);
  ASSERT_TRUE(ranks_[0]->Wait(absl::Seconds(10)).ok());
  for (int attempt = 0; attempt < 2; ++attempt) {
    const uint64_t context_id = client_->NewContextId();
    std::vector<std::pair<uint64_t, Tensor>> gradients;
    for (size_t p = 0; p < kModel.size(); ++p) {
      gradients.emplace_back(params_[1][p].id, RankGradient(1, p, 0));
    }
    ASSERT_TRUE(
        client_->AccumulateGradients(addresses_[1], context_id, gradients)
            .ok());
    const absl::Time start = absl::Now();
    grpc::Status stepped = Step(1, context_id);
    EXPECT_NE(stepped.error_code(), grpc::StatusCode::OK);
    EXPECT_THAT(stepped.error_message(), HasSubstr("rank 0"));
    EXPECT_LT(absl::Now() - start, absl::Seconds(5 + 8))
        << "attempt " << attempt << ": " << stepped.error_message();
  }
}

class ZeroShutdownTest : public ZeroServiceTest {
 protected:
  void SetUp() override {
    extra_flags_ = {"--shutdown_grace=1s"};
    StartRanks(2);
  }
};

// A rank stopped while its step waits in a collective for a rank that never
// steps exits soon after its grace (exit code 7: calls outlived it), not at
// the collective's timeout.
TEST_F(ZeroShutdownTest, AStepWaitingForAnotherRankDoesNotHoldTheShutdown) {
  v1::CreateZeroRequest spec = SgdSpec(kLr);
  spec.set_timeout_ms(120000);
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  const uint64_t context_id = PushGradients(0);
  grpc::Status stepped;
  std::thread step([&] { stepped = Step(0, context_id); });  // Rank 1: none.
  // Long enough for the call to be in the collective (it takes a few ms
  // to get there); the test fails, not hangs, if it is not.
  absl::SleepFor(absl::Seconds(1));
  const absl::Time stopping = absl::Now();
  ranks_[0]->Signal(SIGTERM);
  absl::StatusOr<int> code = ranks_[0]->Wait(absl::Seconds(30));
  step.join();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 7);
  // The grace (1 s) and the margin for cancelled calls (5 s).
  EXPECT_LT(absl::Now() - stopping, absl::Seconds(10));
  EXPECT_FALSE(stepped.ok());
}

}  // namespace
}  // namespace distopt
