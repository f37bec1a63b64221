// GroupService on a real daemon: the group it was started in, and the
// key-value store that bootstraps collectives.
#include <signal.h>

#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/group.grpc.pb.h"
#include "tests/group_calls.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::AsMember;
using ::distopt::testing::Barrier;
using ::distopt::testing::GetGroup;
using ::distopt::testing::GroupAfterJoining;
using ::distopt::testing::GroupServiceClient;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class GroupServiceTest : public testing::WorkerTest {
 protected:
  std::vector<std::string> WorkerFlags() const override {
    return {"--rank=1", "--world_size=3",
            "--peers=127.0.0.1:1001,127.0.0.1:1002"};
  }
  std::string GroupSecret() const override { return testing::kTestGroupSecret; }
  std::unique_ptr<v1::GroupService::Stub> GroupClient() {
    return GroupServiceClient(client_, address_);
  }
};

TEST_F(GroupServiceTest, ReportsTheGroupFromTheFlags) {
  grpc::ClientContext context;
  v1::GroupInfo info;
  ASSERT_TRUE(
      GroupClient()->GetGroup(&context, v1::GetGroupRequest(), &info).ok());
  EXPECT_EQ(info.rank(), 1);
  EXPECT_EQ(info.world_size(), 3);
  EXPECT_THAT(info.peers(), ElementsAre("127.0.0.1:1001", "127.0.0.1:1002"));
  // Chosen from the ranks' devices once they join: none yet.
  EXPECT_EQ(info.backend(), "");
}

TEST_F(GroupServiceTest, StoreSetsGetsWaitsAndCounts) {
  auto stub = GroupClient();
  {
    grpc::ClientContext context;
    AsMember(&context);
    v1::GetRequest get;
    get.set_key("nccl/unique_id");
    v1::GetResponse value;
    EXPECT_EQ(stub->Get(&context, get, &value).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  // A waiter blocks until another rank sets the key.
  std::thread waiter([&] {
    grpc::ClientContext context;
    AsMember(&context);
    v1::WaitRequest wait;
    wait.add_keys("nccl/unique_id");
    wait.set_timeout_ms(30000);
    v1::WaitResponse done;
    EXPECT_TRUE(GroupClient()->Wait(&context, wait, &done).ok());
  });
  {
    grpc::ClientContext context;
    AsMember(&context);
    v1::SetRequest set;
    set.set_key("nccl/unique_id");
    set.set_value(std::string("\x01\x02\x00\x03", 4));
    v1::SetResponse done;
    ASSERT_TRUE(stub->Set(&context, set, &done).ok());
  }
  waiter.join();
  {
    grpc::ClientContext context;
    AsMember(&context);
    v1::GetRequest get;
    get.set_key("nccl/unique_id");
    v1::GetResponse value;
    ASSERT_TRUE(stub->Get(&context, get, &value).ok());
    EXPECT_EQ(value.value(), std::string("\x01\x02\x00\x03", 4));
  }
  for (int expected : {1, 2, 3}) {
    grpc::ClientContext context;
    AsMember(&context);
    v1::AddRequest add;
    add.set_key("joined");
    add.set_delta(1);
    v1::AddResponse value;
    ASSERT_TRUE(stub->Add(&context, add, &value).ok());
    EXPECT_EQ(value.value(), expected);
  }
}

TEST_F(GroupServiceTest, WaitTimesOutAndBadTimeoutsAreRefused) {
  auto stub = GroupClient();
  grpc::ClientContext context;
  AsMember(&context);
  v1::WaitRequest wait;
  wait.add_keys("rank2/ready");
  wait.set_timeout_ms(100);
  v1::WaitResponse done;
  grpc::Status status = stub->Wait(&context, wait, &done);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(status.error_message(), HasSubstr("\"rank2/ready\" not set"));
  grpc::ClientContext again;
  AsMember(&again);
  wait.set_timeout_ms(0);
  status = stub->Wait(&again, wait, &done);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("timeout_ms"));
}

TEST(GroupJoinTest, ThreeDaemonsJoinThroughRankZeroAndMeetAtABarrier) {
  std::unique_ptr<LocalWorker> rank0 = testing::StartRankOrDie(
      {"--rank=0", "--world_size=3", "--rendezvous=127.0.0.1:1",
       "--group_timeout=60s"});
  ASSERT_NE(rank0, nullptr);
  Client client;
  EXPECT_EQ(GetGroup(client, rank0->address()).state(), v1::GroupInfo::JOINING);
  std::unique_ptr<LocalWorker> rank1 = testing::StartRankOrDie(
      {"--rank=1", "--world_size=3", "--rendezvous=" + rank0->address()});
  std::unique_ptr<LocalWorker> rank2 = testing::StartRankOrDie(
      {"--rank=2", "--world_size=3", "--rendezvous=" + rank0->address()});
  ASSERT_TRUE(rank1 != nullptr && rank2 != nullptr);
  // A barrier on every rank at once is a real collective among the daemons.
  std::vector<grpc::Status> results(3);
  std::vector<std::thread> calls;
  const std::vector<std::string> addresses = {
      rank0->address(), rank1->address(), rank2->address()};
  for (int r = 0; r < 3; ++r) {
    calls.emplace_back([&, r] {
      Client own;
      results[r] = Barrier(own, addresses[r], 30000);
    });
  }
  for (std::thread& call : calls) call.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(results[r].ok()) << r << ": " << results[r].error_message();
    const v1::GroupInfo info = GetGroup(client, addresses[r]);
    EXPECT_EQ(info.state(), v1::GroupInfo::READY);
    // Every rank in host memory: the tensors go through gloo.
    EXPECT_EQ(info.backend(), "gloo");
  }
  // A rank that is killed makes the next barrier fail on the others.
  rank2->Signal(SIGKILL);
  ASSERT_TRUE(rank2->Wait(absl::Seconds(10)).ok());
  std::vector<grpc::Status> after(2);
  std::vector<std::thread> survivors;
  for (int r = 0; r < 2; ++r) {
    survivors.emplace_back([&, r] {
      Client own;
      after[r] = Barrier(own, addresses[r], 5000);
    });
  }
  for (std::thread& call : survivors) call.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(after[r].ok()) << r;
    EXPECT_THAT(after[r].error_message(),
                HasSubstr("lost: rank 2 (" + addresses[2] + ")"))
        << r;
  }
}

// A rank started with another --world_size: each rank's group error names
// the sizes, not only gloo's lengths of the ranks' address lists.
TEST(GroupJoinTest, RanksStartedWithDifferentWorldSizesAreToldSo) {
  std::unique_ptr<LocalWorker> rank0 = testing::StartRankOrDie(
      {"--rank=0", "--world_size=2", "--rendezvous=127.0.0.1:1",
       "--group_timeout=5s"});
  ASSERT_NE(rank0, nullptr);
  std::unique_ptr<LocalWorker> rank1 = testing::StartRankOrDie(
      {"--rank=1", "--world_size=3", "--rendezvous=" + rank0->address(),
       "--group_timeout=5s"});
  ASSERT_NE(rank1, nullptr);
  Client client;
  const std::vector<std::pair<LocalWorker*, std::string>> expected = {
      {rank0.get(), "this rank (0) has --world_size=2, rank 1 has 3"},
      {rank1.get(), "this rank (1) has --world_size=3, rank 0 has 2"}};
  for (const auto& [rank, why] : expected) {
    const v1::GroupInfo info =
        GroupAfterJoining(client, rank->address(), absl::Seconds(30));
    EXPECT_EQ(info.state(), v1::GroupInfo::FAILED);
    EXPECT_THAT(info.error(), HasSubstr(why));
  }
}

// Through rank 0's store a group forms only whole: a rank's daemon
// restarted after the group formed is told so at once (and what to do),
// instead of waiting as JOINING for a round no other rank will connect.
TEST(GroupJoinTest, ARankRestartedWithoutEtcdIsToldItCannotRejoin) {
  const std::vector<std::string> flags = {"--world_size=2",
                                          "--group_timeout=30s"};
  std::vector<std::string> first = flags;
  first.insert(first.end(), {"--rank=0", "--rendezvous=127.0.0.1:1"});
  std::unique_ptr<LocalWorker> rank0 = testing::StartRankOrDie(first);
  ASSERT_NE(rank0, nullptr);
  std::vector<std::string> second = flags;
  second.insert(second.end(), {"--rank=1", "--rendezvous=" + rank0->address()});
  std::unique_ptr<LocalWorker> rank1 = testing::StartRankOrDie(second);
  ASSERT_NE(rank1, nullptr);
  Client client;
  for (LocalWorker* rank : {rank0.get(), rank1.get()}) {
    testing::PollUntil(
        [&] {
          return GetGroup(client, rank->address()).state() ==
                 v1::GroupInfo::READY;
        },
        absl::Seconds(30));
  }
  rank1->Signal(SIGKILL);
  ASSERT_TRUE(rank1->Wait(absl::Seconds(10)).ok());
  rank1 = testing::StartRankOrDie(second);
  ASSERT_NE(rank1, nullptr);
  const absl::Time start = absl::Now();
  const v1::GroupInfo info =
      GroupAfterJoining(client, rank1->address(), absl::Seconds(40));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(info.state(), v1::GroupInfo::FAILED);
  EXPECT_THAT(info.error(), HasSubstr("a restart of rank 1"));
  EXPECT_THAT(info.error(), HasSubstr("--rendezvous=etcd://"));
}

TEST(GroupJoinTest, ARankAloneGivesUpAtItsTimeoutAndStillStops) {
  std::unique_ptr<LocalWorker> rank0 =
      testing::StartRankOrDie({"--rank=0", "--world_size=2",
                               "--peers=127.0.0.1:1", "--group_timeout=1s"});
  ASSERT_NE(rank0, nullptr);
  Client client;
  const v1::GroupInfo info =
      GroupAfterJoining(client, rank0->address(), absl::Seconds(20));
  EXPECT_EQ(info.state(), v1::GroupInfo::FAILED);
  EXPECT_FALSE(info.error().empty());
  grpc::Status status = Barrier(client, rank0->address(), 1000);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(GroupJoinTest, ShutdownDoesNotWaitForMissingPeers) {
  std::unique_ptr<LocalWorker> rank1 =
      testing::StartRankOrDie({"--rank=1", "--world_size=2",
                               "--peers=127.0.0.1:1", "--group_timeout=600s"});
  ASSERT_NE(rank1, nullptr);
  const absl::Time start = absl::Now();
  absl::StatusOr<int> code = rank1->Stop(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

}  // namespace
}  // namespace distopt
