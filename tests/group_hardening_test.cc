// Defects found by probing the data-parallel group as an attacker and a
// faulty cluster would (issue 12), through real daemons: the store is the
// group's alone and bounded, a waiting call frees its thread when its
// caller leaves, every collective keeps to the timeout its call gave, and a
// collective that failed on one rank is said, then repaired by re-forming
// the group without restarting any daemon.
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/group_secret.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/group.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tests/group_calls.h"
#include "tests/zero_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::AsMember;
using ::distopt::testing::GetGroup;
using ::distopt::testing::GroupServiceClient;
using ::distopt::testing::PollUntil;
using ::testing::HasSubstr;

// A rank of a group of three whose peers never come: its own store serves.
class StoreTest : public testing::WorkerTest {
 protected:
  std::vector<std::string> WorkerFlags() const override {
    return {"--rank=0", "--world_size=3", "--rendezvous=127.0.0.1:1",
            "--max_total_bytes=16000000"};
  }
  std::string GroupSecret() const override { return testing::kTestGroupSecret; }

  // The store's calls, carrying `secret` (none if empty).
  grpc::Status Set(const std::string& key, const std::string& value,
                   const std::string& secret) {
    grpc::ClientContext context;
    AsMember(&context, secret);
    v1::SetRequest request;
    request.set_key(key);
    request.set_value(value);
    v1::SetResponse response;
    return GroupServiceClient(client_, address_)
        ->Set(&context, request, &response);
  }
  grpc::Status Get(const std::string& key, const std::string& secret,
                   v1::GetResponse* value) {
    grpc::ClientContext context;
    AsMember(&context, secret);
    v1::GetRequest request;
    request.set_key(key);
    return GroupServiceClient(client_, address_)->Get(&context, request, value);
  }
};

// Only the group's members may use its store: a client without the secret,
// or with another, can neither read the ranks' addresses nor overwrite
// them; GetGroup stays open to operators.
TEST_F(StoreTest, OnlyTheGroupMayUseItsStore) {
  ASSERT_TRUE(
      Set("gloo/round0/0", "rank 0's address", testing::kTestGroupSecret).ok());
  for (const std::string secret : {"", "not the secret of this group"}) {
    grpc::Status set = Set("gloo/round0/0", "garbage", secret);
    EXPECT_EQ(set.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(set.error_message(), HasSubstr(kGroupSecretMetadata));
    v1::GetResponse value;
    EXPECT_EQ(Get("gloo/round0/0", secret, &value).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_TRUE(value.value().empty());
  }
  v1::GetResponse value;
  ASSERT_TRUE(Get("gloo/round0/0", testing::kTestGroupSecret, &value).ok());
  EXPECT_EQ(value.value(), "rank 0's address");
  grpc::ClientContext info_context;
  v1::GroupInfo info;
  EXPECT_TRUE(GroupServiceClient(client_, address_)
                  ->GetGroup(&info_context, v1::GetGroupRequest(), &info)
                  .ok());
}

// The store counts against --max_total_bytes: a member cannot grow it past
// the budget either.
TEST_F(StoreTest, TheStoreIsBoundedByTheMemoryBudget) {
  const std::string four_mib(4 << 20, 'x');
  int stored = 0;
  grpc::Status status;
  for (; stored < 250; ++stored) {
    status =
        Set(absl::StrCat("big/", stored), four_mib, testing::kTestGroupSecret);
    if (!status.ok()) break;
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("--max_total_bytes"));
  EXPECT_EQ(stored, 3);  // 16 MB holds three 4 MiB values.
}

// A counter that would overflow is refused, not wrapped.
TEST_F(StoreTest, ACounterDoesNotWrap) {
  auto add = [&](int64_t delta, v1::AddResponse* response) {
    grpc::ClientContext context;
    AsMember(&context);
    v1::AddRequest request;
    request.set_key("counter");
    request.set_delta(delta);
    return GroupServiceClient(client_, address_)
        ->Add(&context, request, response);
  };
  v1::AddResponse response;
  ASSERT_TRUE(add(std::numeric_limits<int64_t>::max(), &response).ok());
  grpc::Status status = add(1, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  ASSERT_TRUE(add(0, &response).ok());
  EXPECT_EQ(response.value(), std::numeric_limits<int64_t>::max());
}

// A Wait whose caller gave up frees its server thread at once, and a
// daemon with waits pending stops within --shutdown_grace.
TEST(StoreWaitTest, AbandonedWaitsFreeTheirThreadsAndShutdownIsPrompt) {
  std::unique_ptr<LocalWorker> rank0 = testing::StartRankOrDie(
      {"--rank=0", "--world_size=2", "--rendezvous=127.0.0.1:1",
       "--shutdown_grace=5s", "--group_timeout=600s"});
  ASSERT_NE(rank0, nullptr);
  const int64_t idle_threads = rank0->ProcStatus("Threads");
  // One channel for all the callers: fifty dialling at once under ASan
  // once lost a connect (UNAVAILABLE before the call was made).
  Client client;
  auto wait = [&](int64_t deadline_ms) {
    grpc::ClientContext context;
    AsMember(&context);
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + absl::Milliseconds(deadline_ms)));
    v1::WaitRequest request;
    request.add_keys("never/set");
    request.set_timeout_ms(40000);
    v1::WaitResponse response;
    return GroupServiceClient(client, rank0->address())
        ->Wait(&context, request, &response);
  };
  std::vector<std::thread> callers;
  for (int i = 0; i < 50; ++i) {
    callers.emplace_back([&] {
      EXPECT_EQ(wait(1000).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    });
  }
  for (std::thread& caller : callers) caller.join();
  // The callers left: their server threads are back soon, long before the
  // waits' own 40 s timeout.
  PollUntil([&] { return rank0->ProcStatus("Threads") < idle_threads + 10; });
  EXPECT_LT(rank0->ProcStatus("Threads"), idle_threads + 10);

  // Waits still pending at SIGTERM end with it, not at their timeouts.
  callers.clear();
  const int64_t threads_before_waits = rank0->ProcStatus("Threads");
  for (int i = 0; i < 20; ++i) {
    callers.emplace_back([&] { wait(60000).IgnoreError(); });
  }
  // The waits are pending: their server threads are up.
  EXPECT_TRUE(PollUntil([&] {
    return rank0->ProcStatus("Threads") >= threads_before_waits + 10;
  })) << "the waits did not arrive";
  const absl::Time start = absl::Now();
  absl::StatusOr<int> code = rank0->Stop(absl::Seconds(60));
  const absl::Duration took = absl::Now() - start;
  for (std::thread& caller : callers) caller.join();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_LT(took, absl::Seconds(10));
}

// Two ranks whose --group_timeout (60 s, the fixture's) is long enough that
// waiting it out shows.
class GroupFailureTest : public ZeroServiceTest {
 protected:
  grpc::Status Barrier(int rank, int64_t timeout_ms) {
    return testing::Barrier(*client_, addresses_[rank], timeout_ms);
  }
  v1::GroupInfo Group(int rank) { return GetGroup(*client_, addresses_[rank]); }
  grpc::health::v1::HealthCheckResponse::ServingStatus Health(
      int rank, const std::string& service) {
    auto stub =
        grpc::health::v1::Health::NewStub(client_->Channel(addresses_[rank]));
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    EXPECT_TRUE(stub->Check(&context, request, &response).ok());
    return response.status();
  }
  // A barrier sent to rank 1 alone: it times out there, at its own timeout,
  // and breaks the group's collectives.
  void BreakTheGroupOnRank1() {
    const absl::Time start = absl::Now();
    grpc::Status alone = Barrier(1, 300);
    EXPECT_EQ(alone.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_LT(absl::Now() - start, absl::Seconds(5))
        << "the barrier waited for --group_timeout, not its own 300 ms";
  }
  // Every rank steps the model once, and ends where a local optimizer fed
  // the averaged gradients does.
  void ExpectACorrectZeroStep() {
    ASSERT_TRUE(CreateZeroOnEveryRank(SgdSpec(kLr)));
    ReferenceTraining reference("sgd");
    ASSERT_TRUE(TrainSteps(reference, 0, 1));
    ExpectEveryRankHolds(reference.values());
  }
};

// The group says it failed, and how; an explicit re-formation on every rank
// repairs it without a restart, and training goes on correctly.
TEST_F(GroupFailureTest, AFailedCollectiveIsSaidAndReformingRepairsIt) {
  BreakTheGroupOnRank1();
  const v1::GroupInfo failed = Group(1);
  EXPECT_EQ(failed.state(), v1::GroupInfo::FAILED);
  EXPECT_THAT(failed.error(), HasSubstr("barrier"));
  EXPECT_THAT(failed.error(), HasSubstr("rank 1"));
  EXPECT_EQ(Health(1, "distopt.v1.ZeroService"),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);

  std::vector<v1::GroupInfo> reformed(2);
  ASSERT_TRUE(OkOnEveryRank([&](int r) {
    grpc::ClientContext context;
    v1::ReformRequest request;
    request.set_timeout_ms(20000);
    return GroupServiceClient(*client_, addresses_[r])
        ->Reform(&context, request, &reformed[r]);
  }));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(reformed[r].state(), v1::GroupInfo::READY);
    EXPECT_EQ(reformed[r].round(), 1);
  }
  EXPECT_EQ(Health(1, "distopt.v1.ZeroService"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  ExpectACorrectZeroStep();
}

// Without an explicit re-formation, the next group call on every rank
// re-forms the group first, and succeeds.
TEST_F(GroupFailureTest, TheNextGroupCallReformsTheGroupByItself) {
  BreakTheGroupOnRank1();
  EXPECT_TRUE(OkOnEveryRank([&](int r) { return Barrier(r, 20000); }));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(Group(r).state(), v1::GroupInfo::READY);
    EXPECT_EQ(Group(r).round(), 1);
  }
  ExpectACorrectZeroStep();
}

// A rank whose peer stays away fails every group call, each trying to
// re-form the group first: the error says what broke the round and the
// latest re-form's failure, not every one since (it went into every
// refusal and log line, growing with each call).
TEST_F(GroupFailureTest, ReformsThatKeepFailingDoNotGrowTheError) {
  BreakTheGroupOnRank1();
  const std::string kReform = "re-forming the group as round";
  for (int call = 0; call < 4; ++call) {
    EXPECT_FALSE(Barrier(1, 300).ok());
    const std::string error = Group(1).error();
    EXPECT_THAT(error, HasSubstr("barrier")) << "the cause is kept";
    int reforms = 0;
    for (size_t at = error.find(kReform); at != std::string::npos;
         at = error.find(kReform, at + 1)) {
      ++reforms;
    }
    EXPECT_LE(reforms, 2) << "after call " << call << ": " << error;
  }
}

// A ZeRO step keeps to the timeout of its optimizer: a rank stepping alone
// gives up after it, not after --group_timeout.
TEST_F(GroupFailureTest, AStepKeepsToItsOptimizersTimeout) {
  v1::CreateZeroRequest spec = SgdSpec(kLr);
  spec.set_timeout_ms(1000);
  ASSERT_TRUE(CreateZeroOnEveryRank(spec));
  const uint64_t context_id = PushGradients(0);
  const absl::Time start = absl::Now();
  grpc::Status alone = Step(1, context_id);
  EXPECT_EQ(alone.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(absl::Now() - start, absl::Seconds(6));
}

}  // namespace
}  // namespace distopt
