// Three gloo ranks bootstrap through a real daemon's GroupService, as ranks
// in different processes do.
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/comm/gloo_communicator.h"
#include "server/comm/remote_rendezvous_store.h"
#include "server/daemon/worker_server.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::kTestGroupSecret;

// A daemon in this process whose store serves the test group; fails the
// test if it does not start.
std::unique_ptr<WorkerServer> StartDaemon() {
  WorkerOptions options;
  options.listen = "127.0.0.1:0";
  options.group_secret = kTestGroupSecret;
  absl::StatusOr<std::unique_ptr<WorkerServer>> daemon =
      WorkerServer::Start(options);
  EXPECT_TRUE(daemon.ok()) << daemon.status();
  return daemon.ok() ? *std::move(daemon) : nullptr;
}

TEST(RemoteRendezvousTest, RanksBootstrapThroughADaemonsStore) {
  std::unique_ptr<WorkerServer> daemon = StartDaemon();
  ASSERT_NE(daemon, nullptr);
  const std::string address = daemon->address();

  std::vector<float> results(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      RemoteRendezvousStore store(address, kTestGroupSecret);
      GlooOptions gloo;
      gloo.rank = r;
      gloo.size = 3;
      gloo.timeout = absl::Seconds(20);
      absl::StatusOr<std::unique_ptr<Communicator>> communicator =
          CreateGlooCommunicator(gloo, &store);
      ASSERT_TRUE(communicator.ok()) << communicator.status();
      std::vector<float> value = {static_cast<float>(r + 1)};
      ASSERT_TRUE((*communicator)
                      ->AllReduce(absl::MakeSpan(value), ReduceOp::kSum)
                      .ok());
      results[r] = value[0];
    });
  }
  for (std::thread& rank : ranks) rank.join();
  EXPECT_THAT(results, ::testing::Each(6.0f));
}

TEST(RemoteRendezvousTest, AMissingKeyTimesOutNamingIt) {
  std::unique_ptr<WorkerServer> daemon = StartDaemon();
  ASSERT_NE(daemon, nullptr);
  RemoteRendezvousStore store(daemon->address(), kTestGroupSecret);
  ASSERT_TRUE(store.Set("a", "1").ok());
  EXPECT_EQ(*store.Get("a", absl::Seconds(1)), "1");
  absl::StatusOr<std::string> missing = store.Get("b", absl::Milliseconds(100));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(missing.status().message(),
              ::testing::HasSubstr("\"b\" not set"));
}

// The store is the group's: a caller without the secret, or with another
// one, is refused and changes nothing.
TEST(RemoteRendezvousTest, TheStoreServesOnlyTheGroupsSecret) {
  std::unique_ptr<WorkerServer> daemon = StartDaemon();
  ASSERT_NE(daemon, nullptr);
  RemoteRendezvousStore member(daemon->address(), kTestGroupSecret);
  ASSERT_TRUE(member.Set("gloo/0", "address of rank 0").ok());
  for (const char* secret : {"", "a guessed secret of the group"}) {
    RemoteRendezvousStore stranger(daemon->address(), secret);
    absl::Status status = stranger.Set("gloo/0", "garbage");
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(stranger.Get("gloo/0", absl::Seconds(1)).status().code(),
              absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(stranger.Delete("gloo/0").code(),
              absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(*member.Get("gloo/0", absl::Seconds(1)), "address of rank 0");
}

}  // namespace
}  // namespace distopt
