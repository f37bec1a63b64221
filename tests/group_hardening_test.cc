// Defects found by probing the data-parallel group as an attacker and a
// faulty cluster would (issue 12), through real daemons: the store is the
// group's alone and bounded, a waiting call frees its thread when its
// caller leaves, every collective keeps to the timeout its call gave, and a
// collective that failed on one rank is said, then repaired by re-forming
// the group without restarting any daemon.
#include <signal.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/group_secret.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/group.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tests/zero_fixture.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

// The daemon's thread count, from /proc.
int Threads(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    int threads = 0;
    if (absl::ConsumePrefix(&rest, "Threads:") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &threads)) {
      return threads;
    }
  }
  return -1;
}

std::unique_ptr<v1::GroupService::Stub> GroupStub(Client& client,
                                                  const std::string& address) {
  return v1::GroupService::NewStub(client.Channel(address));
}

// A rank of a group of three whose peers never come: its own store serves.
class StoreTest : public testing::WorkerTest {
 protected:
  std::vector<std::string> WorkerFlags() const override {
    return {"--rank=0", "--world_size=3", "--rendezvous=127.0.0.1:1",
            "--max_total_bytes=16000000"};
  }
  std::string GroupSecret() const override { return testing::kTestGroupSecret; }

  grpc::Status Set(const std::string& key, const std::string& value,
                   const std::string& secret) {
    grpc::ClientContext context;
    if (!secret.empty()) context.AddMetadata(kGroupSecretMetadata, secret);
    v1::SetRequest request;
    request.set_key(key);
    request.set_value(value);
    v1::SetResponse response;
    return GroupStub(client_, address_)->Set(&context, request, &response);
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
    grpc::ClientContext get_context;
    if (!secret.empty()) get_context.AddMetadata(kGroupSecretMetadata, secret);
    v1::GetRequest get;
    get.set_key("gloo/round0/0");
    v1::GetResponse value;
    EXPECT_EQ(GroupStub(client_, address_)
                  ->Get(&get_context, get, &value)
                  .error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_TRUE(value.value().empty());
  }
  grpc::ClientContext context;
  context.AddMetadata(kGroupSecretMetadata, testing::kTestGroupSecret);
  v1::GetRequest get;
  get.set_key("gloo/round0/0");
  v1::GetResponse value;
  ASSERT_TRUE(GroupStub(client_, address_)->Get(&context, get, &value).ok());
  EXPECT_EQ(value.value(), "rank 0's address");
  grpc::ClientContext info_context;
  v1::GroupInfo info;
  EXPECT_TRUE(GroupStub(client_, address_)
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
    context.AddMetadata(kGroupSecretMetadata, testing::kTestGroupSecret);
    v1::AddRequest request;
    request.set_key("counter");
    request.set_delta(delta);
    return GroupStub(client_, address_)->Add(&context, request, response);
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
  const int idle_threads = Threads(rank0->pid());
  auto wait = [&](int64_t deadline_ms) {
    Client client;
    grpc::ClientContext context;
    context.AddMetadata(kGroupSecretMetadata, testing::kTestGroupSecret);
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + absl::Milliseconds(deadline_ms)));
    v1::WaitRequest request;
    request.add_keys("never/set");
    request.set_timeout_ms(40000);
    v1::WaitResponse response;
    return GroupStub(client, rank0->address())
        ->Wait(&context, request, &response);
  };
  std::vector<std::thread> callers;
  for (int i = 0; i < 50; ++i) {
    callers.emplace_back([&] {
      EXPECT_EQ(wait(1000).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    });
  }
  for (std::thread& caller : callers) caller.join();
  // The callers left: within a second their server threads are back.
  absl::SleepFor(absl::Seconds(1));
  EXPECT_LT(Threads(rank0->pid()), idle_threads + 10);

  // Waits still pending at SIGTERM end with it, not at their timeouts.
  callers.clear();
  for (int i = 0; i < 20; ++i) {
    callers.emplace_back([&] { wait(60000).IgnoreError(); });
  }
  absl::SleepFor(absl::Milliseconds(500));
  const absl::Time start = absl::Now();
  absl::StatusOr<int> code = rank0->Stop(absl::Seconds(60));
  const absl::Duration took = absl::Now() - start;
  for (std::thread& caller : callers) caller.join();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_LT(took, absl::Seconds(10));
}

class GroupFailureTest : public ZeroServiceTest {
 protected:
  // A group timeout long enough that waiting it out shows.
  void SetUp() override {
    extra_flags_ = {"--group_timeout=60s"};
    StartRanks(2);
  }

  grpc::Status Barrier(int rank, int64_t timeout_ms) {
    grpc::ClientContext context;
    v1::BarrierRequest request;
    request.set_timeout_ms(timeout_ms);
    v1::BarrierResponse response;
    return GroupStub(*client_, addresses_[rank])
        ->Barrier(&context, request, &response);
  }
  v1::GroupInfo Group(int rank) {
    grpc::ClientContext context;
    v1::GroupInfo info;
    EXPECT_TRUE(GroupStub(*client_, addresses_[rank])
                    ->GetGroup(&context, v1::GetGroupRequest(), &info)
                    .ok());
    return info;
  }
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
    std::vector<v1::ZeroInfo> infos(2);
    for (const grpc::Status& status : OnEveryRank(
             [&](int r) { return CreateZero(r, SgdSpec(kLr), &infos[r]); })) {
      ASSERT_TRUE(status.ok()) << status.error_message();
    }
    const uint64_t context_id = PushGradients(0);
    for (const grpc::Status& status :
         OnEveryRank([&](int r) { return Step(r, context_id); })) {
      ASSERT_TRUE(status.ok()) << status.error_message();
    }
    ReferenceTraining reference("sgd");
    reference.Step(2, 0);
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
  for (const grpc::Status& status : OnEveryRank([&](int r) {
         grpc::ClientContext context;
         v1::ReformRequest request;
         request.set_timeout_ms(20000);
         return GroupStub(*client_, addresses_[r])
             ->Reform(&context, request, &reformed[r]);
       })) {
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
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
  for (const grpc::Status& status :
       OnEveryRank([&](int r) { return Barrier(r, 20000); })) {
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(Group(r).state(), v1::GroupInfo::READY);
    EXPECT_EQ(Group(r).round(), 1);
  }
  ExpectACorrectZeroStep();
}

// A ZeRO step keeps to the timeout of its optimizer: a rank stepping alone
// gives up after it, not after --group_timeout.
TEST_F(GroupFailureTest, AStepKeepsToItsOptimizersTimeout) {
  std::vector<v1::ZeroInfo> infos(2);
  v1::CreateZeroRequest spec = SgdSpec(kLr);
  spec.set_timeout_ms(1000);
  for (const grpc::Status& status :
       OnEveryRank([&](int r) { return CreateZero(r, spec, &infos[r]); })) {
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  const uint64_t context_id = PushGradients(0);
  const absl::Time start = absl::Now();
  grpc::Status alone = Step(1, context_id);
  EXPECT_EQ(alone.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(absl::Now() - start, absl::Seconds(6));
}

}  // namespace
}  // namespace distopt
