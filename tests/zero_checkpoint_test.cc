// A ZeRO group's state in its ranks' checkpoints: every rank saves its own
// shard with the group's step; after the ranks are SIGKILLed and restarted
// on their folders, CreateZero with the same specification resumes the
// group (the step count goes on, and training continues bit for bit as an
// uninterrupted run); ranks whose newest checkpoints hold different steps
// resume the newest step every rank keeps; ranks with no such step, or a
// different optimizer, are refused on every rank, saying why; a group of
// another world size reshards the checkpoint.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/zero_fixture.h"

namespace distopt {
namespace {

namespace fs = std::filesystem;

class ZeroCheckpointTest : public ZeroServiceTest {
 protected:
  void SetUp() override {
    root_ = fs::path(std::getenv("TEST_TMPDIR")) /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    extra_flags_ = {"--checkpoint_dir=" + (root_ / "rank{rank}").string()};
    StartRanks(InitialWorld());
  }

  virtual int InitialWorld() const { return 2; }

  fs::path Dir(int rank) const { return root_ / absl::StrCat("rank", rank); }

  // CreateZero(spec) on every rank, `steps` steps (`reference` with them),
  // then a save on every rank.
  ::testing::AssertionResult CreateTrainAndSave(
      const v1::CreateZeroRequest& spec, ReferenceTraining& reference,
      int steps) {
    ::testing::AssertionResult done = CreateZeroOnEveryRank(spec);
    if (done) done = TrainSteps(reference, 0, steps);
    if (done) done = SaveOnEveryRank();
    return done;
  }

  fs::path root_;
};

TEST_F(ZeroCheckpointTest, KilledRanksResumeTheGroupFromTheirShards) {
  const v1::CreateZeroRequest spec = Spec("adam", kLr);
  ReferenceTraining reference("adam");
  ASSERT_TRUE(CreateTrainAndSave(spec, reference, 3));
  ReferenceTraining lost("adam");       // Only stepped along.
  ASSERT_TRUE(TrainSteps(lost, 3, 2));  // Lost with the ranks.

  ASSERT_NO_FATAL_FAILURE(KillAndRestart());
  ExpectEveryRankHolds(reference.values());
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  EXPECT_EQ(Steps(0), 3);
  EXPECT_EQ(Steps(1), 3);
  // The state came back too: the next steps are the uninterrupted run's.
  ASSERT_TRUE(TrainSteps(reference, 3, 3));
  ExpectEveryRankHolds(reference.values());
  EXPECT_EQ(Steps(0), 6);
}

// A save between a restart and the group's CreateZero (on demand, by
// time, at shutdown) saves the restored group state again: it is not
// rotated away, and the group still resumes after another restart.
TEST_F(ZeroCheckpointTest, ASaveBeforeCreateKeepsTheGroupsState) {
  const v1::CreateZeroRequest spec = Spec("adam", kLr);
  ReferenceTraining reference("adam");
  ASSERT_TRUE(CreateTrainAndSave(spec, reference, 2));
  ASSERT_NO_FATAL_FAILURE(KillAndRestart());
  ASSERT_TRUE(SaveOnEveryRank());
  ASSERT_TRUE(SaveOnEveryRank());  // Rotates the first one out (keep 1).
  ASSERT_NO_FATAL_FAILURE(KillAndRestart());
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  EXPECT_EQ(Steps(0), 2);
  ASSERT_TRUE(TrainSteps(reference, 2, 1));
  ExpectEveryRankHolds(reference.values());
}

// With --checkpoint_every_steps every rank saves at the same group steps
// (the step after one waits for its copy), so the group resumes from them.
TEST_F(ZeroCheckpointTest, PeriodicSavesAreAtTheSameGroupStepOnEveryRank) {
  StopRanks();
  fs::remove_all(root_);
  extra_flags_.push_back("--checkpoint_every_steps=2");
  StartRanks(2);
  const v1::CreateZeroRequest spec = Spec("adam", kLr);
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  ReferenceTraining reference("adam");
  ASSERT_TRUE(TrainSteps(reference, 0, 4));
  ReferenceTraining lost("adam");       // Only stepped along.
  ASSERT_TRUE(TrainSteps(lost, 4, 1));  // The fifth step is lost.
  // The saves at group steps 2 and 4 are both written on both ranks.
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(testing::PollUntil([&] {
      absl::StatusOr<v1::ListCheckpointsResponse> listed =
          client_->ListCheckpoints(addresses_[r]);
      return listed.ok() && listed->checkpoints_size() == 2;
    })) << "rank "
        << r;
  }
  ASSERT_NO_FATAL_FAILURE(KillAndRestart());
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  EXPECT_EQ(Steps(0), 4);
  EXPECT_EQ(Steps(1), 4);
  ASSERT_TRUE(TrainSteps(reference, 4, 2));
  ExpectEveryRankHolds(reference.values());
}

// Saves at group steps 1 and 3 on both ranks; rank 1's newest is then
// damaged, so that it restores step 1 while rank 0 restores step 3 (as
// after a crash between the ranks' writes of the save at step 3).
// `reference` is left at step 1.
class ZeroTornSaveTest : public ZeroCheckpointTest {
 protected:
  void SaveTwiceAndDamageRankOnesNewest(const v1::CreateZeroRequest& spec,
                                        ReferenceTraining& reference) {
    ASSERT_TRUE(CreateTrainAndSave(spec, reference, 1));
    ReferenceTraining ahead("adam");  // Only stepped along.
    ASSERT_TRUE(TrainSteps(ahead, 1, 2));
    ASSERT_TRUE(SaveOnEveryRank());
    const fs::path values = Dir(1) / "parameters" / "values.bin";
    std::fstream file(values, std::ios::in | std::ios::out | std::ios::binary);
    char byte = 0;
    file.read(&byte, 1);
    file.seekp(0);
    byte = static_cast<char>(byte ^ 0x40);
    file.write(&byte, 1);
  }
};

// The ranks' newest checkpoints hold different group steps: they resume
// at the newest step every rank keeps, rank 0 from its older checkpoint
// (parameters and shard), and train on as an uninterrupted run.
TEST_F(ZeroTornSaveTest, RanksResumeTheNewestGroupStepEveryRankKeeps) {
  const v1::CreateZeroRequest spec = Spec("adam", kLr);
  ReferenceTraining reference("adam");
  ASSERT_NO_FATAL_FAILURE(SaveTwiceAndDamageRankOnesNewest(spec, reference));
  ASSERT_NO_FATAL_FAILURE(KillAndRestart());
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  EXPECT_EQ(Steps(0), 1);
  EXPECT_EQ(Steps(1), 1);
  ExpectEveryRankHolds(reference.values());
  ASSERT_TRUE(TrainSteps(reference, 1, 2));
  ExpectEveryRankHolds(reference.values());
}

// After a fallback, the rank that was ahead still keeps the newer
// checkpoint of the run the group abandoned. Group steps are compared
// within a run: when that rank dies again before its next save, while the
// other saved the same step of the new run, they fall back again rather
// than mix the two runs' models.
TEST_F(ZeroTornSaveTest, AnAbandonedRunsCheckpointIsNeverResumed) {
  const v1::CreateZeroRequest spec = Spec("adam", kLr);
  ReferenceTraining reference("adam");
  ASSERT_NO_FATAL_FAILURE(SaveTwiceAndDamageRankOnesNewest(spec, reference));
  ASSERT_NO_FATAL_FAILURE(KillAndRestart());
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  ASSERT_EQ(Steps(0), 1);
  // The new run reaches group step 3 with other gradients than the old
  // one; only rank 1 saves it.
  ReferenceTraining other("adam");
  ASSERT_TRUE(TrainSteps(other, 5, 2));
  ASSERT_EQ(Steps(0), 3);
  ASSERT_TRUE(client_->SaveCheckpoint(addresses_[1]).ok());
  ASSERT_NO_FATAL_FAILURE(KillAndRestart());
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  EXPECT_EQ(Steps(0), 1);
  EXPECT_EQ(Steps(1), 1);
  ExpectEveryRankHolds(reference.values());
}

// With no step that every rank keeps, every rank refuses, saying which
// step each restored and which each keeps; nothing is created.
TEST_F(ZeroTornSaveTest, RanksWithNoCommonGroupStepAreRefused) {
  const v1::CreateZeroRequest spec = Spec("adam", kLr);
  ReferenceTraining reference("adam");
  ASSERT_NO_FATAL_FAILURE(SaveTwiceAndDamageRankOnesNewest(spec, reference));
  for (auto& rank : ranks_) rank->Signal(SIGKILL);
  for (auto& rank : ranks_) ASSERT_TRUE(rank->Wait(absl::Seconds(30)).ok());
  ranks_.clear();
  fs::remove_all(Dir(0) / "parameters.1");  // Rank 0 keeps step 3 only.
  ASSERT_NO_FATAL_FAILURE(KillAndRestart());
  const std::vector<grpc::Status> created = OnEveryRank([&](int r) {
    v1::ZeroInfo info;
    return CreateZero(r, spec, &info);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(created[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << "rank " << r << ": " << created[r].error_message();
    EXPECT_TRUE(
        absl::StrContains(created[r].error_message(),
                          "rank 0: group step 3 of world size 2 (keeps 3), "
                          "rank 1: group step 1 of world size 2 (keeps 1)"))
        << created[r].error_message();
  }
  // Nothing was created: GetZero says so.
  v1::ZeroInfo info;
  EXPECT_EQ(
      Call(0, &v1::ZeroService::Stub::GetZero, v1::GetZeroRequest(), &info)
          .error_code(),
      grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ZeroCheckpointTest, ADifferentOptimizerIsRefusedOnEveryRank) {
  ASSERT_TRUE(CreateZeroOnEveryRank(Spec("adam", kLr)));
  ReferenceTraining reference("adam");
  ASSERT_TRUE(TrainSteps(reference, 0, 1));
  ASSERT_TRUE(SaveOnEveryRank());
  ASSERT_NO_FATAL_FAILURE(KillAndRestart());
  const std::vector<grpc::Status> created = OnEveryRank([&](int r) {
    v1::ZeroInfo info;
    return CreateZero(r, Spec("sgd", kLr), &info);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(created[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << "rank " << r << ": " << created[r].error_message();
  }
  EXPECT_TRUE(absl::StrContains(created[0].error_message(),
                                "the checkpoint holds rank 0 of 2's ZeRO "
                                "optimizer (adam"))
      << created[0].error_message();
}

// (world size saved at, world size resumed at).
class ZeroCheckpointReshardTest
    : public ZeroCheckpointTest,
      public ::testing::WithParamInterface<std::tuple<int, int>> {
 protected:
  int InitialWorld() const override { return std::get<0>(GetParam()); }
};

// A group checkpoint saved at world size W resumes at W': each rank reads
// its new partition's state from the saved ranks' folders (the manifest
// names them), ranks new to the group take the checkpoint's model, and
// the consolidated state is exactly what was saved.
TEST_P(ZeroCheckpointReshardTest, ResumesAtAnotherWorldSize) {
  const int resumed_world = std::get<1>(GetParam());
  const v1::CreateZeroRequest spec = Spec("adam", kLr);
  ReferenceTraining reference("adam");
  ASSERT_TRUE(CreateTrainAndSave(spec, reference, 3));
  const std::string saved = testing::CanonicalBytes(Consolidated(0));
  const std::vector<Tensor> model = ReadModel(0);
  ReferenceTraining lost("adam");
  ASSERT_TRUE(TrainSteps(lost, 3, 1));  // Lost with the ranks.

  // New ranks hold other values: they must take the checkpoint's.
  std::vector<Tensor> other;
  for (size_t p = 0; p < kModel.size(); ++p) {
    other.push_back(testing::Ramp(kModel[p].second, 5.0f, -0.5f));
  }
  ASSERT_NO_FATAL_FAILURE(KillAndRestart(resumed_world, other));
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  for (int r = 0; r < resumed_world; ++r) EXPECT_EQ(Steps(r), 3) << r;
  ExpectEveryRankHolds(model);
  EXPECT_EQ(testing::CanonicalBytes(Consolidated(0)), saved);
  // And the group trains on at its new size, every rank alike.
  ASSERT_TRUE(TrainSteps(reference, 3, 2));
  const std::vector<Tensor> trained = ReadModel(0);
  ExpectEveryRankHolds(trained);
  for (size_t p = 0; p < kModel.size(); ++p) {
    absl::Span<const float> got = trained[p].host_span<float>();
    absl::Span<const float> want = reference.values()[p].host_span<float>();
    for (size_t e = 0; e < got.size(); ++e) {
      // Only the gradients' summation order differs from the reference.
      ASSERT_NEAR(got[e], want[e], 1e-5f) << kModel[p].first << "[" << e << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ZeroCheckpointReshardTest,
                         ::testing::Values(std::make_tuple(2, 3),
                                           std::make_tuple(3, 2),
                                           std::make_tuple(4, 2)));

// A saved rank's folder that cannot be read refuses the reshard on every
// rank, naming the folder, the rank and the step; nothing is created.
TEST_F(ZeroCheckpointTest, AReshardWithoutARanksFolderIsRefused) {
  const v1::CreateZeroRequest spec = Spec("adam", kLr);
  ReferenceTraining reference("adam");
  ASSERT_TRUE(CreateTrainAndSave(spec, reference, 2));
  for (auto& rank : ranks_) rank->Signal(SIGKILL);
  for (auto& rank : ranks_) ASSERT_TRUE(rank->Wait(absl::Seconds(30)).ok());
  ranks_.clear();
  // Rank 1's folder is gone with its host; it comes back as an empty one.
  fs::remove_all(Dir(1));
  ASSERT_NO_FATAL_FAILURE(KillAndRestart(3, reference.values()));
  const std::vector<grpc::Status> created = OnEveryRank([&](int r) {
    v1::ZeroInfo info;
    return CreateZero(r, spec, &info);
  });
  std::string messages;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(created[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << "rank " << r << ": " << created[r].error_message();
    absl::StrAppend(&messages, created[r].error_message(), "\n");
  }
  EXPECT_TRUE(absl::StrContains(
      messages, absl::StrCat(Dir(1).string(),
                             " holds no whole checkpoint of rank 1 of 2 at "
                             "group step 2")))
      << messages;
  v1::ZeroInfo info;
  EXPECT_EQ(
      Call(0, &v1::ZeroService::Stub::GetZero, v1::GetZeroRequest(), &info)
          .error_code(),
      grpc::StatusCode::FAILED_PRECONDITION);
}

}  // namespace
}  // namespace distopt
