// LocalSgdService across real daemons joined through rank 0's store:
// ranks step on their own gradients and diverge, an averaging step leaves
// them bit-identical and equal to the mean of what each rank would have
// reached alone; the service reports the schedule; a run resumed from the
// ranks' state dicts on fresh daemons continues exactly like an
// uninterrupted one; a rank lost before the averaging is named within the
// timeout.
#include <signal.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/local_sgd_fixture.h"

namespace distopt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(LocalSgdTest, RanksDivergeThenAverageToTheirMean) {
  std::vector<v1::PostLocalSgdInfo> infos;
  ASSERT_TRUE(CreateOnEveryRank(Spec(0.0, 2), &infos).ok());
  EXPECT_EQ(infos[1].rank(), 1);
  EXPECT_EQ(infos[1].bucket_bytes(), 25 << 20);  // DDP's default.
  EXPECT_EQ(infos[1].next_averaging_step(), 2);
  EXPECT_EQ(infos[1].next_averaging_group_size(), 2);
  EXPECT_THAT(infos[1].next_averaging_ranks(), ElementsAre(0, 1));
  EXPECT_EQ(infos[1].next_gradient_group_size(), 2);  // Before the switch.
  for (int step = 0; step < 3; ++step) {
    EXPECT_THAT(StepEveryRank(step),
                ElementsAre(step == 2 ? 2 : 0, step == 2 ? 2 : 0));
  }
  // Step 3 used each rank's own gradients: the ranks differ now.
  std::vector<Tensor> before0 = ReadModel(0), before1 = ReadModel(1);
  EXPECT_TRUE(testing::SameBytes(before0[0], before1[0]));  // Averaged at 2.
  EXPECT_THAT(StepEveryRank(3), ElementsAre(0, 0));
  std::vector<Tensor> after0 = ReadModel(0), after1 = ReadModel(1);
  EXPECT_FALSE(testing::SameBytes(after0[0], after1[0]));
  v1::PostLocalSgdInfo info;
  ASSERT_TRUE(LocalSgdCall(0, &v1::LocalSgdService::Stub::GetPostLocalSgd,
                           v1::GetPostLocalSgdRequest(), &info)
                  .ok());
  EXPECT_EQ(info.step(), 4);
  EXPECT_EQ(info.next_averaging_step(), 4);
  EXPECT_EQ(info.next_gradient_group_size(), 0);  // No reduction after 2.
  // Step 4 averages: each rank's plain SGD step on its own gradient, then
  // the mean of the two, which in fp32 is exact whatever the order. The
  // last parameter has no gradient anywhere: not stepped, not averaged.
  const size_t last = kModel.size() - 1;
  EXPECT_THAT(StepEveryRank(4, {last}), ElementsAre(2, 2));
  std::vector<Tensor> averaged0 = ReadModel(0), averaged1 = ReadModel(1);
  for (size_t p = 0; p < last; ++p) {
    EXPECT_TRUE(testing::SameBytes(averaged0[p], averaged1[p]))
        << kModel[p].first;
    Tensor g0 = RankGradient(0, p, 4), g1 = RankGradient(1, p, 4);
    for (int64_t e = 0; e < after0[p].num_elements(); ++e) {
      const float mine = after0[p].host_span<float>()[e] -
                         static_cast<float>(kLr) * g0.host_span<float>()[e];
      const float theirs = after1[p].host_span<float>()[e] -
                           static_cast<float>(kLr) * g1.host_span<float>()[e];
      ASSERT_EQ(averaged0[p].host_span<float>()[e], (mine + theirs) * 0.5f)
          << kModel[p].first << "[" << e << "]";
    }
  }
  EXPECT_TRUE(testing::SameBytes(averaged0[last], after0[last]));
  EXPECT_TRUE(testing::SameBytes(averaged1[last], after1[last]));
  EXPECT_FALSE(testing::SameBytes(averaged0[last], averaged1[last]));
}

// GetPostLocalSgd answers at once while a step waits in a collective for
// a peer (up to the step's timeout), with the state after the last step.
TEST_F(LocalSgdTest, GetAnswersWhileAStepWaitsForAPeer) {
  v1::CreatePostLocalSgdRequest spec = Spec(0.0, 2);
  spec.set_timeout_ms(4000);
  std::vector<v1::PostLocalSgdInfo> infos;
  ASSERT_TRUE(CreateOnEveryRank(spec, &infos).ok());
  v1::PostLocalSgdStepRequest request;
  request.set_context_id(PushGradients(0, {}, {}));
  grpc::Status stepped;
  std::thread alone([&] {  // Rank 1 never steps: it waits for it.
    v1::PostLocalSgdStepResponse response;
    stepped =
        LocalSgdCall(0, &v1::LocalSgdService::Stub::Step, request, &response);
  });
  absl::SleepFor(absl::Milliseconds(500));
  const absl::Time start = absl::Now();
  v1::PostLocalSgdInfo info;
  grpc::Status got =
      LocalSgdCall(0, &v1::LocalSgdService::Stub::GetPostLocalSgd,
                   v1::GetPostLocalSgdRequest(), &info);
  const absl::Duration took = absl::Now() - start;
  alone.join();
  ASSERT_TRUE(got.ok()) << got.error_message();
  EXPECT_LT(took, absl::Seconds(2)) << "GetPostLocalSgd waited for the step";
  EXPECT_EQ(info.step(), 0);
  EXPECT_FALSE(stepped.ok());  // Timed out waiting for rank 1.
}

// A step or an LR change that one rank refuses on its own checks: the
// others learn of it in the call's first collective, at once, not after
// their timeout (30 s here); nothing changes, and the run goes on.
TEST_F(LocalSgdTest, ARefusalOnOneRankReachesTheOthersAtOnce) {
  v1::CreatePostLocalSgdRequest spec = Spec(0.0, 2);
  spec.set_timeout_ms(30000);
  std::vector<v1::PostLocalSgdInfo> infos;
  ASSERT_TRUE(CreateOnEveryRank(spec, &infos).ok());
  const uint64_t context_id = PushGradients(0, {}, {});
  const uint64_t unknown = client_->NewContextId();
  std::vector<v1::PostLocalSgdStepResponse> responses(world_);
  absl::Time start = absl::Now();
  std::vector<grpc::Status> stepped = OnEveryRank([&](int r) {
    v1::PostLocalSgdStepRequest request;
    request.set_context_id(r == 1 ? unknown : context_id);
    return LocalSgdCall(r, &v1::LocalSgdService::Stub::Step, request,
                        &responses[r]);
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(stepped[1].error_code(), grpc::StatusCode::NOT_FOUND)
      << stepped[1].error_message();
  EXPECT_EQ(stepped[0].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << stepped[0].error_message();
  EXPECT_THAT(stepped[0].error_message(), HasSubstr("rank 1 refused"));
  for (size_t p = 0; p < kModel.size(); ++p) {
    absl::StatusOr<Tensor> now = client_->ReadParameter(params_[0][p]);
    ASSERT_TRUE(now.ok()) << now.status();
    EXPECT_TRUE(testing::SameBytes(*now, Initial(p))) << kModel[p].first;
  }
  std::vector<v1::PostLocalSgdInfo> changed(world_);
  start = absl::Now();
  std::vector<grpc::Status> results = OnEveryRank([&](int r) {
    v1::SetZeroHyperparametersRequest request;
    request.set_group(r == 1 ? 9 : 0);
    (*request.mutable_hyperparameters())["lr"].set_number(0.25);
    return LocalSgdCall(r, &v1::LocalSgdService::Stub::SetHyperparameters,
                        request, &changed[r]);
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (const grpc::Status& status : results) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << status.error_message();
  }
  // Both ranks are still at step 0 and step on together.
  EXPECT_EQ(StepEveryRank(0), std::vector<int>(world_, 0));
  v1::PostLocalSgdInfo info;
  ASSERT_TRUE(LocalSgdCall(1, &v1::LocalSgdService::Stub::GetPostLocalSgd,
                           v1::GetPostLocalSgdRequest(), &info)
                  .ok());
  EXPECT_EQ(info.step(), 1);
}

TEST_F(LocalSgdTest, GradientsReduceWithinTheRanksOfThisHostByDefault) {
  v1::CreatePostLocalSgdRequest spec = Spec(0.0, 2);
  spec.set_no_post_local_gradient_allreduce(false);
  spec.set_subgroup_size(0);  // The ranks on this host: both, on loopback.
  std::vector<v1::PostLocalSgdInfo> infos;
  ASSERT_TRUE(CreateOnEveryRank(spec, &infos).ok());
  for (int step = 0; step < 4; ++step) StepEveryRank(step);
  v1::PostLocalSgdInfo info;
  ASSERT_TRUE(LocalSgdCall(0, &v1::LocalSgdService::Stub::GetPostLocalSgd,
                           v1::GetPostLocalSgdRequest(), &info)
                  .ok());
  EXPECT_EQ(info.next_gradient_group_size(), 2);
  // Both ranks reduce together at every step, so they never diverge.
  std::vector<Tensor> model0 = ReadModel(0), model1 = ReadModel(1);
  for (size_t p = 0; p < kModel.size(); ++p) {
    EXPECT_TRUE(testing::SameBytes(model0[p], model1[p])) << kModel[p].first;
  }
}

TEST_F(LocalSgdTest, AResumedRunContinuesLikeAnUninterruptedOne) {
  std::vector<v1::PostLocalSgdInfo> infos;
  ASSERT_TRUE(CreateOnEveryRank(Spec(0.9, 2), &infos).ok());
  for (int step = 0; step < 7; ++step) StepEveryRank(step);
  const std::vector<std::vector<Tensor>> uninterrupted = {ReadModel(0),
                                                          ReadModel(1)};
  StopRanks();

  StartRanks(2);
  ASSERT_TRUE(CreateOnEveryRank(Spec(0.9, 2), &infos).ok());
  for (int step = 0; step < 3; ++step) StepEveryRank(step);
  std::vector<v1::PostLocalSgdStateDict> saved(world_);
  std::vector<std::vector<Tensor>> values;
  for (int r = 0; r < world_; ++r) {
    absl::StatusOr<v1::PostLocalSgdStateDict> dict =
        RemoteLocalSgd(client_.get(), addresses_[r]).GetStateDict();
    ASSERT_TRUE(dict.ok()) << dict.status();
    saved[r] = *std::move(dict);
    EXPECT_EQ(saved[r].step(), 3);
    values.push_back(ReadModel(r));
  }
  StopRanks();

  StartRanksHolding(2, values);
  ASSERT_TRUE(CreateOnEveryRank(Spec(0.9, 2), &infos).ok());
  for (int r = 0; r < world_; ++r) {
    absl::StatusOr<std::vector<std::string>> warnings =
        RemoteLocalSgd(client_.get(), addresses_[r]).LoadStateDict(saved[r]);
    ASSERT_TRUE(warnings.ok()) << warnings.status();
    EXPECT_TRUE(warnings->empty());
  }
  // No second warm-up: the step is 3, gradients are no longer reduced.
  v1::PostLocalSgdInfo info;
  ASSERT_TRUE(LocalSgdCall(1, &v1::LocalSgdService::Stub::GetPostLocalSgd,
                           v1::GetPostLocalSgdRequest(), &info)
                  .ok());
  EXPECT_EQ(info.step(), 3);
  EXPECT_EQ(info.next_gradient_group_size(), 0);
  for (int step = 3; step < 7; ++step) StepEveryRank(step);
  for (int r = 0; r < world_; ++r) {
    std::vector<Tensor> resumed = ReadModel(r);
    for (size_t p = 0; p < kModel.size(); ++p) {
      EXPECT_TRUE(testing::SameBytes(resumed[p], uninterrupted[r][p]))
          << "rank " << r << " " << kModel[p].first;
    }
  }
}

// With --checkpoint_dir the ranks' checkpoints hold the post-local SGD
// optimizer: after both ranks are SIGKILLed and restarted on their
// folders, CreatePostLocalSgd with the same specification resumes it (the
// averager's step, so no second warm-up; the momentum state), and the run
// ends where an uninterrupted one does.
TEST_F(LocalSgdTest,
       KilledRanksResumeFromTheirCheckpointsWithoutASecondWarmUp) {
  std::vector<v1::PostLocalSgdInfo> infos;
  ASSERT_TRUE(CreateOnEveryRank(Spec(0.9, 2), &infos).ok());
  for (int step = 0; step < 7; ++step) StepEveryRank(step);
  const std::vector<std::vector<Tensor>> uninterrupted = {ReadModel(0),
                                                          ReadModel(1)};
  StopRanks();

  const std::string root =
      std::string(std::getenv("TEST_TMPDIR")) + "/local_sgd_checkpoints";
  extra_flags_ = {"--checkpoint_dir=" + root + "/rank{rank}"};
  StartRanks(2);
  ASSERT_TRUE(CreateOnEveryRank(Spec(0.9, 2), &infos).ok());
  for (int step = 0; step < 3; ++step) StepEveryRank(step);
  ASSERT_TRUE(SaveOnEveryRank());
  StepEveryRank(3);  // Lost with the ranks.
  ASSERT_NO_FATAL_FAILURE(KillAndRestart());

  ASSERT_TRUE(CreateOnEveryRank(Spec(0.9, 2), &infos).ok());
  EXPECT_EQ(infos[0].step(), 3);
  EXPECT_EQ(infos[1].step(), 3);
  EXPECT_EQ(infos[1].next_gradient_group_size(), 0);  // No second warm-up.
  for (int step = 3; step < 7; ++step) StepEveryRank(step);
  for (int r = 0; r < world_; ++r) {
    std::vector<Tensor> resumed = ReadModel(r);
    for (size_t p = 0; p < kModel.size(); ++p) {
      EXPECT_TRUE(testing::SameBytes(resumed[p], uninterrupted[r][p]))
          << "rank " << r << " " << kModel[p].first;
    }
  }
}

// A group checkpoint resumed at another world size: the ranks' local
// models and states do not map onto the new ranks, so every rank resumes
// as a copy of the lowest rank that restored it (its parameters and its
// momentum, read from its folder through the manifest), and the averager's
// step goes on (no second warm-up).
TEST_F(LocalSgdTest, AGroupOfAnotherSizeResumesAsCopiesOfItsLowestRank) {
  StopRanks();
  const std::string root =
      std::string(std::getenv("TEST_TMPDIR")) + "/local_sgd_reshard";
  extra_flags_ = {"--checkpoint_dir=" + root + "/rank{rank}"};
  StartRanks(2);
  std::vector<v1::PostLocalSgdInfo> infos;
  ASSERT_TRUE(CreateOnEveryRank(Spec(0.9, 2), &infos).ok());
  for (int step = 0; step < 3; ++step) StepEveryRank(step);
  ASSERT_TRUE(SaveOnEveryRank());
  const std::vector<Tensor> saved = ReadModel(0);
  // Step 3 averages nowhere: rank 0's next model depends on its own
  // gradient and momentum only.
  ASSERT_THAT(StepEveryRank(3), ElementsAre(0, 0));
  const std::vector<Tensor> stepped = ReadModel(0);

  std::vector<Tensor> other;
  for (size_t p = 0; p < kModel.size(); ++p) {
    other.push_back(testing::Ramp(kModel[p].second, 5.0f, -0.5f));
  }
  ASSERT_NO_FATAL_FAILURE(KillAndRestart(3, other));
  ASSERT_TRUE(CreateOnEveryRank(Spec(0.9, 2), &infos).ok());
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(infos[r].step(), 3) << r;
    EXPECT_EQ(infos[r].next_gradient_group_size(), 0) << r;
  }
  ExpectEveryRankHolds(saved);
  // Every rank is rank 0 again: given rank 0's gradients, each takes the
  // step rank 0 took before the crash.
  const uint64_t context_id = client_->NewContextId();
  for (int r = 0; r < 3; ++r) {
    std::vector<std::pair<uint64_t, Tensor>> gradients;
    for (size_t p = 0; p < kModel.size(); ++p) {
      gradients.emplace_back(params_[r][p].id, RankGradient(0, p, 3));
    }
    ASSERT_TRUE(
        client_->AccumulateGradients(addresses_[r], context_id, gradients)
            .ok());
  }
  v1::PostLocalSgdStepRequest request;
  request.set_context_id(context_id);
  std::vector<v1::PostLocalSgdStepResponse> responses(3);
  ASSERT_TRUE(OkOnEveryRank([&](int r) {
    return LocalSgdCall(r, &v1::LocalSgdService::Stub::Step, request,
                        &responses[r]);
  }));
  ExpectEveryRankHolds(stepped);
}

TEST_F(LocalSgdTest, HierarchicalAveragingOnFourDaemons) {
  StopRanks();
  StartRanks(4);
  v1::CreatePostLocalSgdRequest spec = Spec(0.0, 0);
  for (auto [period, size] : {std::pair<int, int>{2, 2}, {4, 4}}) {
    v1::AveragerPeriod* entry = spec.mutable_hierarchical()->add_periods();
    entry->set_period(period);
    entry->set_group_size(size);
  }
  std::vector<v1::PostLocalSgdInfo> infos;
  ASSERT_TRUE(CreateOnEveryRank(spec, &infos).ok());
  EXPECT_THAT(infos[3].next_averaging_ranks(), ElementsAre(0, 1, 2, 3));
  // Steps 0 (all four), 1 (none), 2 (pairs), 3 (none), 4 (all four).
  const std::vector<int> sizes = {4, 0, 2, 0, 4};
  for (int step = 0; step < 5; ++step) {
    EXPECT_THAT(StepEveryRank(step), ::testing::Each(sizes[step]))
        << "step " << step;
    std::vector<std::vector<Tensor>> models;
    for (int r = 0; r < world_; ++r) models.push_back(ReadModel(r));
    for (int r = 0; r < world_; ++r) {
      const bool with_first = sizes[step] == 4 || (sizes[step] == 2 && r < 2);
      const bool with_third = sizes[step] == 4 || (sizes[step] == 2 && r >= 2);
      EXPECT_EQ(testing::SameBytes(models[r][0], models[0][0]),
                with_first || r == 0)
          << "step " << step << " rank " << r;
      EXPECT_EQ(testing::SameBytes(models[r][0], models[2][0]),
                with_third || r == 2)
          << "step " << step << " rank " << r;
    }
    if (step == 1) {
      v1::PostLocalSgdInfo info;
      ASSERT_TRUE(LocalSgdCall(3, &v1::LocalSgdService::Stub::GetPostLocalSgd,
                               v1::GetPostLocalSgdRequest(), &info)
                      .ok());
      EXPECT_EQ(info.next_averaging_step(), 2);
      EXPECT_THAT(info.next_averaging_ranks(), ElementsAre(2, 3));
    }
  }
}

TEST_F(LocalSgdTest, BadRequestsGetClearErrors) {
  // Before CreatePostLocalSgd.
  v1::PostLocalSgdStepRequest step;
  step.set_context_id(client_->NewContextId());
  v1::PostLocalSgdStepResponse stepped;
  ASSERT_TRUE(
      client_
          ->AccumulateGradients(addresses_[0], step.context_id(),
                                {{params_[0][0].id, RankGradient(0, 0, 0)}})
          .ok());
  grpc::Status early =
      LocalSgdCall(0, &v1::LocalSgdService::Stub::Step, step, &stepped);
  EXPECT_EQ(early.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(early.error_message(), HasSubstr("CreatePostLocalSgd first"));
  // No averager; a negative subgroup size; an unknown parameter.
  v1::CreatePostLocalSgdRequest no_averager = Spec(0.0, 2);
  no_averager.clear_periodic();
  v1::CreatePostLocalSgdRequest negative = Spec(0.0, 2);
  negative.set_subgroup_size(-2);
  v1::CreatePostLocalSgdRequest unknown = Spec(0.0, 2);
  unknown.mutable_groups(0)->add_parameter_names("fc9.weight");
  v1::CreatePostLocalSgdRequest tiny_bucket = Spec(0.0, 2);
  tiny_bucket.set_bucket_bytes(100);
  for (const auto& [request, expected] :
       {std::make_pair(no_averager, "averager: not set"),
        std::make_pair(negative, "subgroup_size: -2"),
        std::make_pair(unknown, "\"fc9.weight\""),
        std::make_pair(tiny_bucket, "bucket_bytes: 100; expected 4096")}) {
    v1::PostLocalSgdInfo info;
    grpc::Status refused = LocalSgdCall(
        0, &v1::LocalSgdService::Stub::CreatePostLocalSgd, request, &info);
    EXPECT_NE(refused.error_code(), grpc::StatusCode::OK) << expected;
    EXPECT_THAT(refused.error_message(), HasSubstr(expected));
  }
  // A state dict with a negative step, or chunks that do not add up.
  std::vector<v1::PostLocalSgdInfo> infos;
  ASSERT_TRUE(CreateOnEveryRank(Spec(0.0, 2), &infos).ok());
  RemoteLocalSgd rank0(client_.get(), addresses_[0]);
  absl::StatusOr<v1::PostLocalSgdStateDict> dict = rank0.GetStateDict();
  ASSERT_TRUE(dict.ok()) << dict.status();
  dict->set_step(-1);
  const absl::Status negative_step = rank0.LoadStateDict(*dict).status();
  EXPECT_EQ(negative_step.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative_step.message(), HasSubstr("step: -1"));
  auto stub = v1::LocalSgdService::NewStub(client_->Channel(addresses_[0]));
  v1::LoadPostLocalSgdStateDictResponse loaded;
  grpc::ClientContext context;
  auto writer = stub->LoadStateDict(&context, &loaded);
  v1::MessageChunk chunk;
  chunk.set_total_bytes(100);
  chunk.set_data("too short");
  writer->Write(chunk);
  writer->WritesDone();
  grpc::Status truncated = writer->Finish();
  EXPECT_EQ(truncated.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(truncated.error_message(), HasSubstr("announced 100"));
}

TEST_F(LocalSgdTest, BadSpecificationsAndALostRank) {
  // A last group size that is not the world size, on every rank.
  v1::CreatePostLocalSgdRequest bad = Spec(0.0, 2);
  v1::AveragerPeriod* period = bad.mutable_hierarchical()->add_periods();
  period->set_period(4);
  period->set_group_size(1);
  std::vector<v1::PostLocalSgdInfo> infos;
  grpc::Status refused = CreateOnEveryRank(bad, &infos);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("expected the world size 2"));
  // start_localsgd_iter other than the warm-up: accepted with a warning.
  ASSERT_TRUE(CreateOnEveryRank(Spec(0.0, 3), &infos).ok());
  EXPECT_THAT(infos[0].warnings(),
              ::testing::Contains(HasSubstr("start_localsgd_iter (3)")));

  // An LR schedule: the same change on every rank, or none.
  for (double other : {0.5, 0.25}) {
    std::vector<v1::PostLocalSgdInfo> changed(world_);
    std::vector<grpc::Status> results = OnEveryRank([&](int r) {
      v1::SetZeroHyperparametersRequest request;
      (*request.mutable_hyperparameters())["lr"].set_number(r == 0 ? 0.25
                                                                   : other);
      return LocalSgdCall(r, &v1::LocalSgdService::Stub::SetHyperparameters,
                          request, &changed[r]);
    });
    for (const grpc::Status& status : results) {
      EXPECT_EQ(status.error_code(),
                other == 0.25 ? grpc::StatusCode::OK
                              : grpc::StatusCode::FAILED_PRECONDITION)
          << status.error_message();
    }
  }
  // Rank 1 dies before step 2, which averages.
  StepEveryRank(0);
  StepEveryRank(1);
  ranks_[1]->Signal(SIGKILL);
  ASSERT_TRUE(ranks_[1]->Wait(absl::Seconds(10)).ok());
  const uint64_t context_id = client_->NewContextId();
  v1::PostLocalSgdStepRequest request;
  request.set_context_id(context_id);
  ASSERT_TRUE(
      client_
          ->AccumulateGradients(addresses_[0], context_id,
                                {{params_[0][0].id, RankGradient(0, 0, 0)}})
          .ok());
  v1::PostLocalSgdStepResponse response;
  const absl::Time start = absl::Now();
  grpc::Status lost =
      LocalSgdCall(0, &v1::LocalSgdService::Stub::Step, request, &response);
  EXPECT_EQ(lost.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(lost.error_message(),
              HasSubstr("lost: rank 1 (" + addresses_[1] + ")"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace distopt
