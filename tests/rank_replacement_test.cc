// A group whose rendezvous is in etcd (--rendezvous=etcd://HOST:PORT/JOB,
// Debian's etcd-server started by the test) outlives any of its ranks:
// rank 0, whose daemon held the group's store before, is SIGKILLed and a
// new daemon started with its rank (on its checkpoint folder) takes its
// place: the other ranks re-form the group with it in their next call,
// report the replacement in GetGroup, drop the optimizer made with the old
// daemon, and CreateZero on every rank resumes the group from its last
// group checkpoint, after which training goes on bit for bit as an
// uninterrupted run. A second live daemon for a held rank is refused.
#include <csignal>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/testing/local_etcd.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "proto/distopt/v1/group.grpc.pb.h"
#include "proto/etcd/etcdserverpb/rpc.grpc.pb.h"
#include "tests/group_calls.h"
#include "tests/local_sgd_fixture.h"

namespace distopt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class RankReplacementTest : public LocalSgdTest {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<testing::LocalEtcd>> etcd =
        testing::LocalEtcd::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    root_ = fs::path(std::getenv("TEST_TMPDIR")) /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    extra_flags_ = CheckpointFlags();
    StartRanks(3);
  }

  std::vector<std::string> CheckpointFlags() const {
    return {"--checkpoint_dir=" + (root_ / "rank{rank}").string(),
            "--checkpoint_every_steps=2", "--checkpoint_keep=2",
            "--rank_hold_ttl=5s"};
  }

  std::vector<std::string> RankFlags(int r, int world) const override {
    std::vector<std::string> flags = {
        absl::StrCat("--rank=", r), absl::StrCat("--world_size=", world),
        "--rendezvous=" + etcd_->Url("job"), "--group_timeout=60s"};
    for (const std::string& flag : extra_flags_) {
      flags.push_back(absl::StrReplaceAll(flag, {{"{rank}", absl::StrCat(r)}}));
    }
    return flags;
  }

  // SIGKILLs rank r's daemon and starts another with the same flags; its
  // parameters are those its checkpoint folder restored.
  void Replace(int r) {
    ranks_[r]->Signal(SIGKILL);
    ASSERT_TRUE(ranks_[r]->Wait(absl::Seconds(30)).ok());
    ranks_[r] = testing::StartRankOrDie(RankFlags(r, world_));
    ASSERT_NE(ranks_[r], nullptr);
    addresses_[r] = ranks_[r]->address();
    for (size_t p = 0; p < kModel.size(); ++p) {
      absl::StatusOr<RemoteParameter> found =
          client_->FindParameter(addresses_[r], kModel[p].first);
      ASSERT_TRUE(found.ok()) << found.status();
      params_[r][p] = *found;
    }
  }

  v1::GroupInfo Group(int r) {
    absl::StatusOr<v1::GroupInfo> group = client_->GetGroup(addresses_[r]);
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? *group : v1::GroupInfo();
  }

  // Until every rank lists `count` checkpoints (periodic saves are written
  // after the step that asked for them).
  void AwaitCheckpoints(int count) {
    for (int r = 0; r < world_; ++r) {
      ASSERT_TRUE(testing::PollUntil([&] {
        absl::StatusOr<v1::ListCheckpointsResponse> listed =
            client_->ListCheckpoints(addresses_[r]);
        return listed.ok() && listed->checkpoints_size() == count;
      })) << "rank "
          << r;
    }
  }

  // SIGKILLs rank 1's daemon and starts another, with no model (none is
  // needed); the other ranks' next group call meets it in round 1 (the
  // call itself is not run, see AKilledRankZeroIsReplaced...), and every
  // rank is READY in round 1.
  void ReplaceRank1AndMeetItInRound1() {
    ranks_[1]->Signal(SIGKILL);
    ASSERT_TRUE(ranks_[1]->Wait(absl::Seconds(30)).ok());
    ranks_[1] = testing::StartRankOrDie(RankFlags(1, world_));
    ASSERT_NE(ranks_[1], nullptr);
    addresses_[1] = ranks_[1]->address();
    std::vector<std::thread> calls;
    for (int r : {0, 2}) {
      calls.emplace_back([&, r] {
        EXPECT_THAT(
            testing::Barrier(*client_, addresses_[r], 20000).error_message(),
            HasSubstr("re-formed as round 1 with rank 1"));
      });
    }
    for (std::thread& call : calls) call.join();
    for (int r = 0; r < world_; ++r) {
      EXPECT_TRUE(testing::PollUntil([&] {
        return Group(r).state() == v1::GroupInfo::READY;
      })) << Group(r).error();
      EXPECT_EQ(Group(r).round(), 1) << "rank " << r;
    }
  }

  // etcd's key-value service, read and written as another client would.
  std::unique_ptr<etcdserverpb::KV::Stub> EtcdKv() const {
    return etcdserverpb::KV::NewStub(grpc::CreateChannel(
        etcd_->endpoint(), grpc::InsecureChannelCredentials()));
  }

  // Puts `value` at `key` of the job in etcd, as another writer would.
  void PutInEtcd(const std::string& key, const std::string& value) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    etcdserverpb::PutRequest put;
    put.set_key("/distopt/job/" + key);
    put.set_value(value);
    etcdserverpb::PutResponse done;
    ASSERT_TRUE(EtcdKv()->Put(&context, put, &done).ok());
  }

  void AwaitEveryRankReady() {
    for (int r = 0; r < world_; ++r) {
      ASSERT_TRUE(testing::PollUntil([&] {
        return Group(r).state() == v1::GroupInfo::READY;
      })) << Group(r).error();
    }
  }

  std::unique_ptr<testing::LocalEtcd> etcd_;
  fs::path root_;
};

TEST_F(RankReplacementTest, AKilledRankZeroIsReplacedAndTheGroupResumes) {
  for (int r = 0; r < world_; ++r) {
    ASSERT_TRUE(testing::PollUntil([&] {
      return Group(r).state() == v1::GroupInfo::READY;
    })) << Group(r).error();
    EXPECT_EQ(Group(r).rendezvous(), etcd_->Url("job"));
    EXPECT_EQ(Group(r).round(), 0);
  }
  const v1::CreateZeroRequest spec = Spec("adam", kLr);
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  ReferenceTraining reference("adam");
  ASSERT_TRUE(TrainSteps(reference, 0, 4));  // Group saves at steps 2, 4.
  ReferenceTraining lost("adam");
  ASSERT_TRUE(TrainSteps(lost, 4, 1));  // Lost with rank 0's daemon.
  ASSERT_NO_FATAL_FAILURE(AwaitCheckpoints(2));

  const std::string old_address = addresses_[0];
  ASSERT_NO_FATAL_FAILURE(Replace(0));
  ASSERT_NE(addresses_[0], old_address);

  // The next step re-forms the group on the other ranks, with the new
  // daemon, and is not run there; the new daemon has no optimizer yet.
  const uint64_t context_id = PushGradients(5);
  std::vector<grpc::Status> stepped =
      OnEveryRank([&](int r) { return Step(r, context_id); });
  EXPECT_EQ(stepped[0].error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(stepped[0].error_message(), HasSubstr("expected CreateZero"));
  for (int r = 1; r < world_; ++r) {
    EXPECT_EQ(stepped[r].error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << stepped[r].error_message();
    EXPECT_THAT(stepped[r].error_message(),
                HasSubstr(absl::StrCat("rank 0 (now ", addresses_[0], ", was ",
                                       old_address, ") replaced")));
    const v1::GroupInfo group = Group(r);
    EXPECT_EQ(group.state(), v1::GroupInfo::READY) << group.error();
    EXPECT_EQ(group.round(), 1);
    ASSERT_EQ(group.replacements_size(), 1);
    EXPECT_EQ(group.replacements(0).rank(), 0);
    EXPECT_EQ(group.replacements(0).address(), addresses_[0]);
    EXPECT_EQ(group.replacements(0).previous_address(), old_address);
    EXPECT_EQ(group.replacements(0).round(), 1);
    // The optimizer made with the old daemon is gone, and says why.
    v1::ZeroInfo info;
    grpc::Status got =
        Call(r, &v1::ZeroService::Stub::GetZero, v1::GetZeroRequest(), &info);
    EXPECT_EQ(got.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(got.error_message(),
                HasSubstr("dropped when rank 0 was replaced (round 1"));
  }
  // The new daemon joined on its own thread, which reports READY after it
  // has read the members' addresses from etcd: a moment after the other
  // ranks' re-formation returned.
  EXPECT_TRUE(testing::PollUntil([&] {
    return Group(0).state() == v1::GroupInfo::READY;
  })) << Group(0).error();
  EXPECT_EQ(Group(0).round(), 1);

  // Every rank resumes from the group checkpoint of step 4: the other
  // ranks' parameters, which had moved on to step 5, come back too.
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  for (int r = 0; r < world_; ++r) EXPECT_EQ(Steps(r), 4) << "rank " << r;
  ExpectEveryRankHolds(reference.values());
  ASSERT_TRUE(TrainSteps(reference, 4, 3));
  ExpectEveryRankHolds(reference.values());
  EXPECT_EQ(Steps(1), 7);
}

// Post-local SGD: a middle rank replaced after its averager's warm-up, and
// the trainer's first call after it CreatePostLocalSgd; the group resumes
// from its last group checkpoint with every rank's own parameters and
// momentum and the averager's step (no second warm-up), and ends where an
// uninterrupted run does, bit for bit.
TEST_F(RankReplacementTest, PostLocalSgdResumesFromTheLastGroupCheckpoint) {
  v1::CreatePostLocalSgdRequest spec = Spec(0.9, 2);
  spec.set_timeout_ms(30000);
  std::vector<v1::PostLocalSgdInfo> infos;
  ASSERT_TRUE(CreateOnEveryRank(spec, &infos).ok());
  for (int step = 0; step < 8; ++step) StepEveryRank(step);
  std::vector<std::vector<Tensor>> uninterrupted;
  for (int r = 0; r < world_; ++r) uninterrupted.push_back(ReadModel(r));
  StopRanks();
  fs::remove_all(root_);

  StartRanks(3);
  ASSERT_TRUE(CreateOnEveryRank(spec, &infos).ok());
  for (int step = 0; step < 5; ++step) StepEveryRank(step);  // Saves at 2, 4.
  ASSERT_NO_FATAL_FAILURE(AwaitCheckpoints(2));
  const std::string old_address = addresses_[1];
  ASSERT_NO_FATAL_FAILURE(Replace(1));

  // The trainer goes straight to CreatePostLocalSgd on every rank: the
  // other ranks meet the new daemon there and resume with it.
  ASSERT_TRUE(CreateOnEveryRank(spec, &infos).ok());
  for (int r = 0; r < world_; ++r) {
    EXPECT_EQ(infos[r].step(), 4) << "rank " << r;
    EXPECT_EQ(infos[r].next_gradient_group_size(), 0);  // No warm-up again.
  }
  for (int r : {0, 2}) {
    ASSERT_EQ(Group(r).replacements_size(), 1) << "rank " << r;
    EXPECT_EQ(Group(r).replacements(0).rank(), 1);
    EXPECT_EQ(Group(r).replacements(0).previous_address(), old_address);
    EXPECT_EQ(Group(r).replacements(0).address(), addresses_[1]);
  }
  for (int step = 4; step < 8; ++step) StepEveryRank(step);
  for (int r = 0; r < world_; ++r) {
    std::vector<Tensor> resumed = ReadModel(r);
    for (size_t p = 0; p < kModel.size(); ++p) {
      EXPECT_TRUE(testing::SameBytes(resumed[p], uninterrupted[r][p]))
          << "rank " << r << " " << kModel[p].first;
    }
  }
}

// etcd gone: the group's collectives do not need it (training goes on),
// and a daemon still stops gracefully within a few seconds (its hold on
// the rank is left to expire).
TEST_F(RankReplacementTest, WithEtcdGoneTheGroupTrainsAndStops) {
  const v1::CreateZeroRequest spec = Spec("adam", kLr);
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  ReferenceTraining reference("adam");
  ASSERT_TRUE(TrainSteps(reference, 0, 1));
  etcd_.reset();
  ASSERT_TRUE(TrainSteps(reference, 1, 1));
  ExpectEveryRankHolds(reference.values());
  for (int r = world_ - 1; r >= 0; --r) {
    const absl::Time start = absl::Now();
    absl::StatusOr<int> code = ranks_[r]->Stop();
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << "rank " << r;
    EXPECT_LT(absl::Now() - start, absl::Seconds(15)) << "rank " << r;
    ranks_[r].reset();
  }
  ranks_.clear();
}

TEST_F(RankReplacementTest, ASecondDaemonForAHeldRankIsRefused) {
  std::vector<std::string> flags = RankFlags(1, world_);
  for (std::string& flag : flags) {
    if (absl::StartsWith(flag, "--group_timeout=")) flag = "--group_timeout=2s";
    if (absl::StartsWith(flag, "--checkpoint_dir=")) {
      flag = "--checkpoint_dir=" + (root_ / "second").string();
    }
  }
  std::unique_ptr<LocalWorker> second = testing::StartRankOrDie(flags);
  ASSERT_NE(second, nullptr);
  v1::GroupInfo group;
  ASSERT_TRUE(testing::PollUntil([&] {
    absl::StatusOr<v1::GroupInfo> got = client_->GetGroup(second->address());
    if (got.ok()) group = *got;
    return got.ok() && group.state() == v1::GroupInfo::FAILED;
  }));
  EXPECT_THAT(group.error(),
              HasSubstr(absl::StrCat("rank 1 is held by the daemon at \"",
                                     addresses_[1], "\"")));
  // The group itself is untouched.
  EXPECT_EQ(Group(1).state(), v1::GroupInfo::READY);
  EXPECT_EQ(Group(1).replacements_size(), 0);
}

// Whoever can write to etcd can put anything under the job's keys: a round
// number no rank could have reached is not taken as the highest (the next
// round after INT64_MAX overflowed, and the group ran as round -2^63).
TEST_F(RankReplacementTest, ARoundSomeoneElseWroteIsIgnored) {
  ASSERT_NO_FATAL_FAILURE(AwaitEveryRankReady());
  ASSERT_NO_FATAL_FAILURE(PutInEtcd("rounds/2", "9223372036854775807"));
  ASSERT_NO_FATAL_FAILURE(ReplaceRank1AndMeetItInRound1());
}

// etcd lost everything (restarted empty): each rank takes its hold again
// once its lease is found gone, and writes its other keys again with it, so
// that a rank replaced afterwards is met as after any replacement (without
// them the replacement started at round 0, the others re-formed at round 1,
// and every rank stayed FAILED until Reform on every rank).
TEST_F(RankReplacementTest, AfterEtcdLostItsDataAReplacedRankIsMet) {
  ASSERT_NO_FATAL_FAILURE(AwaitEveryRankReady());
  ASSERT_TRUE(etcd_->RestartEmpty().ok());
  // Each rank finds its lease gone at its next renewal (a third of the
  // 5 s hold) and writes its keys again.
  const std::unique_ptr<etcdserverpb::KV::Stub> kv = EtcdKv();
  for (int r = 0; r < world_; ++r) {
    EXPECT_TRUE(testing::PollUntil([&] {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
      etcdserverpb::RangeRequest range;
      range.set_key(absl::StrCat("/distopt/job/rounds/", r));
      etcdserverpb::RangeResponse found;
      return kv->Range(&context, range, &found).ok() && found.kvs_size() == 1;
    })) << "rank "
        << r << "'s round was not written again";
  }
  ASSERT_NO_FATAL_FAILURE(ReplaceRank1AndMeetItInRound1());
}

// Another writer's value in a rank's daemon address (a megabyte of bytes
// that are not text) is quoted where the group names that rank, as lost:
// the call's error stays small and GetGroup still answers.
TEST_F(RankReplacementTest, ADaemonAddressSomeoneElseWroteIsQuoted) {
  ASSERT_NO_FATAL_FAILURE(AwaitEveryRankReady());
  ASSERT_NO_FATAL_FAILURE(PutInEtcd("daemons/2", std::string(1 << 20, '\xff')));
  ranks_[2]->Signal(SIGKILL);
  ASSERT_TRUE(ranks_[2]->Wait(absl::Seconds(30)).ok());
  // Named in the call's error, which travels in gRPC metadata.
  const grpc::Status barrier = testing::Barrier(*client_, addresses_[0], 1000);
  EXPECT_FALSE(barrier.ok());
  EXPECT_THAT(barrier.error_message(), HasSubstr("rank 2 (\""));
  EXPECT_THAT(barrier.error_message(), HasSubstr("(1048576 bytes)"));
  EXPECT_LT(barrier.error_message().size(), 4096u);
  EXPECT_TRUE(client_->GetGroup(addresses_[0]).ok());
  ranks_[2].reset();  // Killed: nothing to stop.
}

}  // namespace
}  // namespace distopt
