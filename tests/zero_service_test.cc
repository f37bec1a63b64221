// ZeroService across real daemons: two ranks joined through rank 0's store
// hold the same model, each pushes its own gradients, and a ZeRO step on
// both leaves identical parameters equal to plain SGD on the averaged
// gradients, with the optimizer state split between the ranks.
#include <signal.h>

#include <cstring>
#include <functional>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/zero.grpc.pb.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 2;
constexpr double kLr = 0.1;
constexpr double kMomentum = 0.9;
const std::vector<std::pair<std::string, Shape>> kModel = {
    {"fc1.weight", {16, 8}},
    {"fc1.bias", {16}},
    {"fc2.weight", {4, 16}},
    {"fc2.bias", {4}}};

v1::CreateZeroRequest SgdSpec(double lr) {
  v1::CreateZeroRequest request;
  request.set_kind("sgd");
  request.set_timeout_ms(30000);
  v1::ZeroParamGroup* group = request.add_groups();
  (*group->mutable_hyperparameters())["lr"].set_number(lr);
  (*group->mutable_hyperparameters())["momentum"].set_number(kMomentum);
  for (const auto& [name, shape] : kModel) group->add_parameter_names(name);
  return request;
}

// The gradient rank `rank` pushes for parameter `p` at step `step`.
Tensor RankGradient(int rank, size_t p, int step) {
  return testing::Ramp(kModel[p].second, 0.25f * rank - 0.5f * step,
                       0.01f * (p + 1) * (rank + 1));
}

class ZeroServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ranks_.push_back(testing::StartWorkerOrDie({"--rank=0", "--world_size=2",
                                                "--rendezvous=127.0.0.1:1",
                                                "--group_timeout=60s"}));
    ASSERT_NE(ranks_[0], nullptr);
    ranks_.push_back(
        testing::StartWorkerOrDie({"--rank=1", "--world_size=2",
                                   "--rendezvous=" + ranks_[0]->address()}));
    ASSERT_NE(ranks_[1], nullptr);
    for (int r = 0; r < kWorld; ++r) {
      addresses_.push_back(ranks_[r]->address());
      std::vector<RemoteParameter> params;
      for (size_t p = 0; p < kModel.size(); ++p) {
        absl::StatusOr<RemoteParameter> param = client_.CreateParameterFrom(
            addresses_[r], kModel[p].first,
            testing::Ramp(kModel[p].second, -1.0f, 0.03f));
        ASSERT_TRUE(param.ok()) << param.status();
        params.push_back(*param);
      }
      params_.push_back(params);
    }
  }

  // Runs `call(rank)` on every rank at once, as a collective needs.
  std::vector<grpc::Status> OnEveryRank(
      const std::function<grpc::Status(int)>& call) {
    std::vector<grpc::Status> results(kWorld);
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
      threads.emplace_back([&, r] { results[r] = call(r); });
    }
    for (std::thread& thread : threads) thread.join();
    return results;
  }

  grpc::Status CreateZero(int rank, const v1::CreateZeroRequest& request,
                          v1::ZeroInfo* info) {
    auto stub = v1::ZeroService::NewStub(client_.Channel(addresses_[rank]));
    grpc::ClientContext context;
    return stub->CreateZero(&context, request, info);
  }

  grpc::Status Step(int rank, uint64_t context_id) {
    auto stub = v1::ZeroService::NewStub(client_.Channel(addresses_[rank]));
    grpc::ClientContext context;
    v1::ZeroStepRequest request;
    request.set_context_id(context_id);
    v1::ZeroStepResponse response;
    return stub->Step(&context, request, &response);
  }

  std::vector<std::unique_ptr<LocalWorker>> ranks_;
  std::vector<std::string> addresses_;
  std::vector<std::vector<RemoteParameter>> params_;
  Client client_;
};

TEST_F(ZeroServiceTest, TwoRanksStepLikeSgdOnTheAveragedGradients) {
  std::vector<v1::ZeroInfo> infos(kWorld);
  std::vector<grpc::Status> created = OnEveryRank(
      [&](int r) { return CreateZero(r, SgdSpec(kLr), &infos[r]); });
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(created[r].ok()) << r << ": " << created[r].error_message();
  }
  // Every parameter has one owner, both ranks own some, and the momentum
  // buffers (one float per element) are split between the ranks.
  int64_t elements = 0;
  for (const auto& [name, shape] : kModel) elements += NumElements(shape);
  ASSERT_EQ(infos[0].owners_size(), static_cast<int>(kModel.size()));
  std::set<int> owners;
  for (const v1::ZeroParameterOwner& owner : infos[0].owners()) {
    owners.insert(owner.rank());
  }
  EXPECT_EQ(owners, (std::set<int>{0, 1}));
  EXPECT_EQ(infos[0].owners_size(), infos[1].owners_size());

  // Plain SGD with momentum on the averaged gradients, for reference.
  std::vector<std::vector<float>> expected, buffers(kModel.size());
  for (size_t p = 0; p < kModel.size(); ++p) {
    Tensor initial = testing::Ramp(kModel[p].second, -1.0f, 0.03f);
    const float* data = initial.host_span<float>().data();
    expected.emplace_back(data, data + initial.num_elements());
  }
  for (int step = 0; step < 3; ++step) {
    const uint64_t context_id = client_.NewContextId();
    for (int r = 0; r < kWorld; ++r) {
      std::vector<std::pair<uint64_t, Tensor>> gradients;
      for (size_t p = 0; p < kModel.size(); ++p) {
        gradients.emplace_back(params_[r][p].id, RankGradient(r, p, step));
      }
      ASSERT_TRUE(
          client_.AccumulateGradients(addresses_[r], context_id, gradients)
              .ok());
    }
    std::vector<grpc::Status> stepped =
        OnEveryRank([&](int r) { return Step(r, context_id); });
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(stepped[r].ok()) << r << ": " << stepped[r].error_message();
    }
    for (size_t p = 0; p < kModel.size(); ++p) {
      Tensor g0 = RankGradient(0, p, step), g1 = RankGradient(1, p, step);
      if (buffers[p].empty()) buffers[p].assign(expected[p].size(), 0.0f);
      for (size_t i = 0; i < expected[p].size(); ++i) {
        const float average =
            (g0.host_span<float>()[i] + g1.host_span<float>()[i]) / 2;
        buffers[p][i] =
            step == 0 ? average : kMomentum * buffers[p][i] + average;
        expected[p][i] -= kLr * buffers[p][i];
      }
    }
  }
  for (size_t p = 0; p < kModel.size(); ++p) {
    absl::StatusOr<Tensor> rank0 = client_.ReadParameter(params_[0][p]);
    absl::StatusOr<Tensor> rank1 = client_.ReadParameter(params_[1][p]);
    ASSERT_TRUE(rank0.ok() && rank1.ok());
    EXPECT_TRUE(testing::SameBytes(*rank0, *rank1)) << kModel[p].first;
    for (size_t i = 0; i < expected[p].size(); ++i) {
      EXPECT_NEAR(rank0->host_span<float>()[i], expected[p][i], 1e-5)
          << kModel[p].first << "[" << i << "]";
    }
  }
  v1::ZeroInfo after[kWorld];
  for (int r = 0; r < kWorld; ++r) {
    auto stub = v1::ZeroService::NewStub(client_.Channel(addresses_[r]));
    grpc::ClientContext context;
    ASSERT_TRUE(stub->GetZero(&context, v1::GetZeroRequest(), &after[r]).ok());
    EXPECT_EQ(after[r].steps(), 3);
    EXPECT_GT(after[r].state_bytes(), 0);
  }
  EXPECT_EQ(after[0].state_bytes() + after[1].state_bytes(),
            elements * static_cast<int64_t>(sizeof(float)));
}

TEST_F(ZeroServiceTest, StepBeforeCreateAndMismatchedSpecsAreRefused) {
  grpc::Status early = Step(0, client_.NewContextId());
  // The context does not exist yet either; whichever is reported, it is a
  // refusal that names what is wrong, not a hang on the other rank.
  EXPECT_NE(early.error_code(), grpc::StatusCode::OK);
  std::vector<v1::ZeroInfo> infos(kWorld);
  std::vector<grpc::Status> created = OnEveryRank([&](int r) {
    return CreateZero(r, SgdSpec(r == 0 ? kLr : 2 * kLr), &infos[r]);
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(created[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << r << ": " << created[r].error_message();
  }
  v1::CreateZeroRequest unknown = SgdSpec(kLr);
  unknown.mutable_groups(0)->add_parameter_names("fc3.weight");
  v1::ZeroInfo info;
  grpc::Status missing = CreateZero(0, unknown, &info);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(missing.error_message(), HasSubstr("fc3.weight"));
  v1::CreateZeroRequest twice = SgdSpec(kLr);
  twice.mutable_groups(0)->add_parameter_names("fc1.bias");
  grpc::Status repeated = CreateZero(0, twice, &info);
  EXPECT_EQ(repeated.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(repeated.error_message(), HasSubstr("\"fc1.bias\" is named"));
}

TEST_F(ZeroServiceTest, AKilledRankFailsTheSurvivorsStepWithoutChangingIt) {
  v1::CreateZeroRequest spec = SgdSpec(kLr);
  spec.set_timeout_ms(5000);
  std::vector<v1::ZeroInfo> infos(kWorld);
  std::vector<grpc::Status> created =
      OnEveryRank([&](int r) { return CreateZero(r, spec, &infos[r]); });
  ASSERT_TRUE(created[0].ok() && created[1].ok());
  std::vector<Tensor> before;
  for (size_t p = 0; p < kModel.size(); ++p) {
    absl::StatusOr<Tensor> values = client_.ReadParameter(params_[0][p]);
    ASSERT_TRUE(values.ok());
    before.push_back(*std::move(values));
  }
  ranks_[1]->Signal(SIGKILL);
  ASSERT_TRUE(ranks_[1]->Wait(absl::Seconds(10)).ok());
  const uint64_t context_id = client_.NewContextId();
  std::vector<std::pair<uint64_t, Tensor>> gradients;
  for (size_t p = 0; p < kModel.size(); ++p) {
    gradients.emplace_back(params_[0][p].id, RankGradient(0, p, 0));
  }
  ASSERT_TRUE(
      client_.AccumulateGradients(addresses_[0], context_id, gradients).ok());
  // The survivor's step fails (no hang past the timeout) before it changes
  // anything: the gradients are averaged before any rank steps.
  grpc::Status stepped = Step(0, context_id);
  EXPECT_FALSE(stepped.ok());
  for (size_t p = 0; p < kModel.size(); ++p) {
    absl::StatusOr<Tensor> values = client_.ReadParameter(params_[0][p]);
    ASSERT_TRUE(values.ok());
    EXPECT_TRUE(testing::SameBytes(*values, before[p])) << kModel[p].first;
  }
}

}  // namespace
}  // namespace distopt
