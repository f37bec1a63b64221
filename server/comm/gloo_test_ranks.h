// For tests: W gloo ranks as threads of one process, over loopback TCP,
// bootstrapped through one in-process key-value store.
#ifndef DISTOPT_SERVER_COMM_GLOO_TEST_RANKS_H_
#define DISTOPT_SERVER_COMM_GLOO_TEST_RANKS_H_

#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/comm/gloo_communicator.h"

namespace distopt {

// Runs body(communicator) on `size` ranks at once; returns when all end.
template <typename Body>
void OnGlooRanks(int size, Body body) {
  KeyValueStore store;
  LocalRendezvousStore rendezvous(&store);
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      GlooOptions options;
      options.rank = r;
      options.size = size;
      options.timeout = absl::Seconds(30);
      absl::StatusOr<std::unique_ptr<Communicator>> communicator =
          CreateGlooCommunicator(options, &rendezvous);
      ASSERT_TRUE(communicator.ok()) << communicator.status();
      body(**communicator);
    });
  }
  for (std::thread& rank : ranks) rank.join();
}

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_GLOO_TEST_RANKS_H_
