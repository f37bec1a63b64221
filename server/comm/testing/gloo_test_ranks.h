// For tests: W gloo ranks as threads of one process, over loopback TCP,
// bootstrapped through one in-process key-value store.
#ifndef DISTOPT_SERVER_COMM_TESTING_GLOO_TEST_RANKS_H_
#define DISTOPT_SERVER_COMM_TESTING_GLOO_TEST_RANKS_H_

#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/comm/communicator_group.h"
#include "server/comm/gloo_communicator.h"

namespace distopt {

// Runs body(group) on `size` ranks at once, each with its CommunicatorGroup
// (subgroups made on first use); returns when all end.
template <typename Body>
void OnGlooGroups(int size, Body body,
                  absl::Duration timeout = absl::Seconds(30)) {
  KeyValueStore store;
  LocalRendezvousStore rendezvous(&store);
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      GlooOptions options;
      options.rank = r;
      options.size = size;
      options.timeout = timeout;
      absl::StatusOr<std::unique_ptr<Communicator>> communicator =
          CreateGlooCommunicator(options, &rendezvous);
      ASSERT_TRUE(communicator.ok()) << communicator.status();
      GlooCommunicatorGroup group(communicator->get(), options, &rendezvous);
      body(group);
    });
  }
  for (std::thread& rank : ranks) rank.join();
}

// Runs body(communicator) on `size` ranks at once; returns when all end.
template <typename Body>
void OnGlooRanks(int size, Body body) {
  OnGlooGroups(size, [&](CommunicatorGroup& group) { body(group.global()); });
}

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_TESTING_GLOO_TEST_RANKS_H_
