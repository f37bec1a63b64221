// ZeroService across real daemons: a state dict consolidated on one rank
// and loaded into a fresh group, at the same or another world size,
// continues training exactly like an uninterrupted run; a refused dict
// changes nothing on any rank; ranks that run out of data join while the
// others keep stepping; a parameter group added midway is partitioned
// after the others.
#include <set>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/optim/wire_optimizer.h"
#include "tests/zero_fixture.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

constexpr int kStepsEach = 4;

// (world size saved at, world size loaded at).
class ZeroReshardingTest
    : public ZeroServiceTest,
      public ::testing::WithParamInterface<std::tuple<int, int>> {
 protected:
  void SetUp() override { StartRanks(std::get<0>(GetParam())); }
};

TEST_P(ZeroReshardingTest, ALoadedStateDictContinuesLikeAnUninterruptedRun) {
  const auto [saved_world, loaded_world] = GetParam();
  ReferenceTraining reference("adam");
  ASSERT_TRUE(CreateZeroOnEveryRank(Spec("adam", kLr)));
  ASSERT_TRUE(TrainSteps(reference, 0, kStepsEach));

  // Nothing is held before a consolidation.
  v1::ZeroStateDict none;
  EXPECT_EQ(GetZeroStateDict(0, &none).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  const int to = saved_world - 1;
  const v1::ZeroStateDict saved = Consolidated(to);
  // The consolidated dict holds every parameter's state, equal to the
  // reference optimizer's, under the parameters' names.
  ASSERT_EQ(saved.parameter_names_size(), static_cast<int>(kModel.size()));
  absl::StatusOr<OptimizerStateDict> dict =
      StateDictFromProto(saved.state_dict());
  ASSERT_TRUE(dict.ok()) << dict.status();
  ASSERT_EQ(dict->state.size(), kModel.size());
  for (size_t p = 0; p < kModel.size(); ++p) {
    EXPECT_EQ(saved.parameter_names(p), kModel[p].first);
    const OptimizerStateDict::Entry& entry = dict->state.at(p);
    const ParameterState& expected = reference.optimizer().state(p);
    EXPECT_EQ(entry.step, expected.step);
    ASSERT_EQ(entry.buffers.size(), expected.buffers.size());
    for (size_t b = 0; b < expected.buffers.size(); ++b) {
      EXPECT_EQ(entry.buffers[b].first, expected.buffers[b].first);
      EXPECT_TRUE(testing::SameBytes(entry.buffers[b].second,
                                     expected.buffers[b].second))
          << kModel[p].first << " " << expected.buffers[b].first;
    }
  }
  std::vector<Tensor> values;
  for (size_t p = 0; p < kModel.size(); ++p) {
    absl::StatusOr<Tensor> value = client_->ReadParameter(params_[0][p]);
    ASSERT_TRUE(value.ok()) << value.status();
    values.push_back(*std::move(value));
  }

  // A fresh group, perhaps of another size, resumes from the saved state.
  StopRanks();
  StartRanks(loaded_world, values);
  ASSERT_TRUE(CreateZeroOnEveryRank(Spec("adam", kLr)));
  ASSERT_TRUE(
      OkOnEveryRank([&](int r) { return LoadZeroStateDict(r, saved); }));
  ASSERT_TRUE(TrainSteps(reference, kStepsEach, kStepsEach));
  ExpectEveryRankHolds(reference.values());
}

INSTANTIATE_TEST_SUITE_P(Worlds, ZeroReshardingTest,
                         ::testing::Values(std::make_tuple(2, 2),
                                           std::make_tuple(3, 2),
                                           std::make_tuple(2, 3)),
                         [](const auto& info) {
                           return absl::StrCat("from", std::get<0>(info.param),
                                               "to", std::get<1>(info.param));
                         });

TEST_F(ZeroServiceTest, AStateDictOneRankRefusesChangesNothingAnywhere) {
  ReferenceTraining reference("adam");
  ASSERT_TRUE(CreateZeroOnEveryRank(Spec("adam", kLr)));
  ASSERT_TRUE(TrainSteps(reference, 0, 2));
  const v1::ZeroStateDict saved = Consolidated(0);

  // Rank 1 is given a dict whose fc1.weight state has the wrong shape.
  v1::ZeroStateDict broken = saved;
  for (v1::ParameterState& state :
       *broken.mutable_state_dict()->mutable_state()) {
    if (state.index() != 0) continue;
    v1::TensorProto& exp_avg = (*state.mutable_buffers())["exp_avg"];
    exp_avg.clear_shape();
    exp_avg.add_shape(128);
  }
  // The rank given it refuses it, naming the field, whether or not it owns
  // fc1.weight; the other rank is refused too, naming that rank.
  for (int refusing = 0; refusing < world_; ++refusing) {
    std::vector<grpc::Status> results = OnEveryRank([&](int r) {
      return LoadZeroStateDict(r, r == refusing ? broken : saved);
    });
    for (int r = 0; r < world_; ++r) {
      if (r == refusing) {
        EXPECT_EQ(results[r].error_code(), grpc::StatusCode::INVALID_ARGUMENT);
        EXPECT_THAT(results[r].error_message(),
                    HasSubstr("state_dict.state[0].exp_avg"));
      } else {
        EXPECT_EQ(results[r].error_code(),
                  grpc::StatusCode::FAILED_PRECONDITION);
        EXPECT_THAT(results[r].error_message(),
                    HasSubstr(absl::StrCat("rank ", refusing, " refused")));
      }
    }
  }
  // Unknown names are refused on every rank, naming the field.
  v1::ZeroStateDict renamed = saved;
  renamed.set_parameter_names(1, "fc9.bias");
  std::vector<grpc::Status> results =
      OnEveryRank([&](int r) { return LoadZeroStateDict(r, renamed); });
  for (int r = 0; r < world_; ++r) {
    EXPECT_EQ(results[r].error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(results[r].error_message(),
                HasSubstr("state_dict.parameter_names[1]: \"fc9.bias\""));
  }
  // Dicts that each fit but differ between the ranks (a learning rate; a
  // step count) are refused on every rank: each would keep its own share.
  v1::ZeroStateDict other_lr = saved;
  (*other_lr.mutable_state_dict()
        ->mutable_param_groups(0)
        ->mutable_hyperparameters())["lr"]
      .set_number(0.5);
  v1::ZeroStateDict other_step = saved;
  other_step.mutable_state_dict()->mutable_state(0)->set_step(7);
  for (const v1::ZeroStateDict* different : {&other_lr, &other_step}) {
    results = OnEveryRank([&](int r) {
      return LoadZeroStateDict(r, r == 1 ? *different : saved);
    });
    for (int r = 0; r < world_; ++r) {
      EXPECT_EQ(results[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
          << r << ": " << results[r].error_message();
      EXPECT_THAT(results[r].error_message(), HasSubstr("the state_dict's"));
    }
  }
  // Nothing changed: training goes on exactly as the reference.
  const v1::ZeroStateDict after = Consolidated(0);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(after, saved));
  ASSERT_TRUE(TrainSteps(reference, 2, 2));
  ExpectEveryRankHolds(reference.values());
}

TEST_F(ZeroServiceTest, ARankThatRunsOutOfDataJoinsWhileTheOtherSteps) {
  ASSERT_TRUE(CreateZeroOnEveryRank(Spec("adam", kLr)));
  ReferenceTraining reference("adam");
  const std::vector<int> data_steps = {5, 2};
  v1::ZeroJoinResponse joined1;
  grpc::Status join1;
  std::thread rank1;
  for (int step = 0; step < data_steps[0]; ++step) {
    const uint64_t context_id = PushGradients(step, data_steps);
    if (step == data_steps[1]) {
      rank1 = std::thread([&] {
        join1 = Call(1, &v1::ZeroService::Stub::Join, v1::ZeroJoinRequest(),
                     &joined1);
      });
      // Once joined, rank 1 refuses steps of its own.
      v1::ZeroInfo info;
      grpc::Status got;
      testing::PollUntil([&] {
        got = Call(1, &v1::ZeroService::Stub::GetZero, v1::GetZeroRequest(),
                   &info);
        return !got.ok() || info.joined();
      });
      ASSERT_TRUE(got.ok()) << got.error_message();
      ASSERT_TRUE(info.joined());
      grpc::Status refused = Step(1, context_id);
      EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
      EXPECT_THAT(refused.error_message(), HasSubstr("has joined"));
    }
    if (step < data_steps[1]) {
      ASSERT_TRUE(OkOnEveryRank([&](int r) { return Step(r, context_id); }));
    } else {
      grpc::Status stepped = Step(0, context_id);
      ASSERT_TRUE(stepped.ok()) << stepped.error_message();
    }
    reference.Step(world_, step, data_steps);
  }
  v1::ZeroJoinResponse joined0;
  grpc::Status join0 =
      Call(0, &v1::ZeroService::Stub::Join, v1::ZeroJoinRequest(), &joined0);
  rank1.join();
  ASSERT_TRUE(join0.ok()) << join0.error_message();
  ASSERT_TRUE(join1.ok()) << join1.error_message();
  EXPECT_EQ(joined0.shadowed_steps(), 0);
  EXPECT_EQ(joined1.shadowed_steps(), data_steps[0] - data_steps[1]);
  ExpectEveryRankHolds(reference.values());
}

TEST_F(ZeroServiceTest, AnLrScheduleChangesEveryRankOrNone) {
  ReferenceTraining reference("sgd");
  ASSERT_TRUE(CreateZeroOnEveryRank(SgdSpec(kLr)));
  ASSERT_TRUE(TrainSteps(reference, 0, 2));
  auto set_lr = [&](const std::function<double(int)>& lr) {
    std::vector<v1::ZeroInfo> infos(world_);
    return OnEveryRank([&](int r) {
      v1::SetZeroHyperparametersRequest request;
      request.set_group(0);
      (*request.mutable_hyperparameters())["lr"].set_number(lr(r));
      return Call(r, &v1::ZeroService::Stub::SetHyperparameters, request,
                  &infos[r]);
    });
  };
  // Ranks given different values, or a bad one, change nothing anywhere.
  for (const grpc::Status& status :
       set_lr([](int r) { return r == 0 ? 0.01 : 0.02; })) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(),
                HasSubstr("hyperparameter changes: rank(s) 1 differ"));
  }
  for (const grpc::Status& status : set_lr([](int) { return -1.0; })) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("lr"));
  }
  ASSERT_TRUE(TrainSteps(reference, 2, 1));
  // The same new value on every rank applies from the next step on.
  for (const grpc::Status& status : set_lr([](int) { return kLr / 4; })) {
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  reference.SetHyperparameters({{"lr", kLr / 4}});
  ASSERT_TRUE(TrainSteps(reference, 3, 2));
  ExpectEveryRankHolds(reference.values());
}

TEST_F(ZeroServiceTest, TheClientLibraryDrivesEachRank) {
  std::vector<RemoteZero> ranks;
  for (int r = 0; r < world_; ++r)
    ranks.emplace_back(client_.get(), addresses_[r]);
  ReferenceTraining reference("sgd");
  auto on_every_rank =
      [&](const std::function<absl::Status(RemoteZero&)>& call) {
        EXPECT_TRUE(
            OkOnEveryRank([&](int r) { return ToGrpcStatus(call(ranks[r])); }));
      };
  on_every_rank(
      [](RemoteZero& rank) { return rank.Create(SgdSpec(kLr)).status(); });
  for (int step = 0; step < 2; ++step) {
    const uint64_t context_id = PushGradients(step);
    on_every_rank([&](RemoteZero& rank) { return rank.Step(context_id); });
    reference.Step(world_, step);
  }
  on_every_rank([](RemoteZero& rank) {
    return rank.SetHyperparameters(0, {{"lr", hyper::Number(kLr / 2)}})
        .status();
  });
  reference.SetHyperparameters({{"lr", kLr / 2}});
  const uint64_t context_id = PushGradients(2);
  on_every_rank([&](RemoteZero& rank) { return rank.Step(context_id); });
  reference.Step(world_, 2);
  ExpectEveryRankHolds(reference.values());
  on_every_rank(
      [](RemoteZero& rank) { return rank.ConsolidateStateDict(1).status(); });
  absl::StatusOr<v1::ZeroStateDict> dict = ranks[1].GetStateDict();
  ASSERT_TRUE(dict.ok()) << dict.status();
  EXPECT_EQ(dict->parameter_names_size(), static_cast<int>(kModel.size()));
  absl::StatusOr<v1::ZeroInfo> info = ranks[0].Get();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->steps(), 3);
  // Errors name the worker and the call.
  const absl::Status elsewhere = ranks[0].GetStateDict().status();
  EXPECT_EQ(elsewhere.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(elsewhere.message(),
              HasSubstr("worker " + addresses_[0] + ": GetStateDict"));
}

TEST_F(ZeroServiceTest, BadArgumentsAreRefusedOnEveryRankAlike) {
  v1::ZeroJoinResponse joined;
  EXPECT_EQ(
      Call(0, &v1::ZeroService::Stub::Join, v1::ZeroJoinRequest(), &joined)
          .error_code(),
      grpc::StatusCode::FAILED_PRECONDITION);  // Before CreateZero.
  ASSERT_TRUE(CreateZeroOnEveryRank(SgdSpec(kLr)));
  v1::ConsolidateZeroStateDictRequest far;
  far.set_to(7);
  std::vector<v1::ConsolidateZeroStateDictResponse> held(world_);
  for (const grpc::Status& status : OnEveryRank([&](int r) {
         return Call(r, &v1::ZeroService::Stub::ConsolidateStateDict, far,
                     &held[r]);
       })) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("to: 7"));
  }
  v1::SetZeroHyperparametersRequest nowhere;
  nowhere.set_group(9);
  (*nowhere.mutable_hyperparameters())["lr"].set_number(0.5);
  std::vector<v1::ZeroInfo> infos(world_);
  for (const grpc::Status& status : OnEveryRank([&](int r) {
         return Call(r, &v1::ZeroService::Stub::SetHyperparameters, nowhere,
                     &infos[r]);
       })) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("group: 9"));
  }
  v1::AddZeroParamGroupRequest empty;
  EXPECT_EQ(Call(0, &v1::ZeroService::Stub::AddParamGroup, empty, &infos[0])
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // A state dict whose tensors do not parse is refused on every rank.
  ReferenceTraining reference("sgd");
  ASSERT_TRUE(TrainSteps(reference, 0, 1));
  v1::ZeroStateDict garbled = Consolidated(0);
  ASSERT_GT(garbled.state_dict().state_size(), 0);
  garbled.mutable_state_dict()
      ->mutable_state(0)
      ->mutable_buffers()
      ->at("momentum_buffer")
      .set_data("short");
  std::vector<grpc::Status> results =
      OnEveryRank([&](int r) { return LoadZeroStateDict(r, garbled); });
  for (const grpc::Status& status : results) {
    EXPECT_NE(status.error_code(), grpc::StatusCode::OK);
  }
}

TEST_F(ZeroServiceTest, AGroupAddedLaterKeepsTheFirstGroupsOwners) {
  v1::CreateZeroRequest spec = SgdSpec(kLr);
  spec.mutable_groups(0)->mutable_parameter_names()->DeleteSubrange(2, 2);
  std::vector<v1::ZeroInfo> before;
  ASSERT_TRUE(CreateZeroOnEveryRank(spec, &before));
  v1::AddZeroParamGroupRequest request;
  (*request.mutable_group()->mutable_hyperparameters())["lr"].set_number(0.5);
  request.mutable_group()->add_parameter_names("fc2.weight");
  request.mutable_group()->add_parameter_names("fc2.bias");
  std::vector<v1::ZeroInfo> after(world_);
  std::vector<grpc::Status> added = OnEveryRank([&](int r) {
    return Call(r, &v1::ZeroService::Stub::AddParamGroup, request, &after[r]);
  });
  for (int r = 0; r < world_; ++r) {
    ASSERT_TRUE(added[r].ok()) << r << ": " << added[r].error_message();
    EXPECT_EQ(after[r].groups(), 2);
    ASSERT_EQ(after[r].owners_size(), 4);
    for (int p = 0; p < 2; ++p) {
      EXPECT_EQ(after[r].owners(p).rank(), before[r].owners(p).rank());
    }
  }
  // Adding a parameter already in a group is refused on every rank.
  for (const grpc::Status& twice : OnEveryRank([&](int r) {
         return Call(r, &v1::ZeroService::Stub::AddParamGroup, request,
                     &after[r]);
       })) {
    EXPECT_EQ(twice.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(twice.error_message(),
                HasSubstr("\"fc2.weight\" is named more"));
  }
  // The model steps as a whole, all ranks equal.
  const uint64_t context_id = PushGradients(0);
  ASSERT_TRUE(OkOnEveryRank([&](int r) { return Step(r, context_id); }));
  for (size_t p = 0; p < kModel.size(); ++p) {
    absl::StatusOr<Tensor> first = client_->ReadParameter(params_[0][p]);
    absl::StatusOr<Tensor> second = client_->ReadParameter(params_[1][p]);
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_TRUE(testing::SameBytes(*first, *second)) << kModel[p].first;
    EXPECT_FALSE(testing::SameBytes(*first, Initial(p))) << kModel[p].first;
  }
}

}  // namespace
}  // namespace distopt
