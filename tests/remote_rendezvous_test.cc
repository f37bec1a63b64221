// Three gloo ranks bootstrap through a real daemon's GroupService, as ranks
// in different processes do.
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/comm/gloo_communicator.h"
#include "server/comm/remote_rendezvous_store.h"
#include "server/daemon/worker_server.h"

namespace distopt {
namespace {

TEST(RemoteRendezvousTest, RanksBootstrapThroughADaemonsStore) {
  WorkerOptions options;
  options.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<WorkerServer>> daemon =
      WorkerServer::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string address = (*daemon)->address();

  std::vector<float> results(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      RemoteRendezvousStore store(address);
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
  WorkerOptions options;
  options.listen = "127.0.0.1:0";
  auto daemon = *WorkerServer::Start(options);
  RemoteRendezvousStore store(daemon->address());
  ASSERT_TRUE(store.Set("a", "1").ok());
  EXPECT_EQ(*store.Get("a", absl::Seconds(1)), "1");
  absl::StatusOr<std::string> missing = store.Get("b", absl::Milliseconds(100));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(missing.status().message(), ::testing::HasSubstr("b not set"));
}

}  // namespace
}  // namespace distopt
