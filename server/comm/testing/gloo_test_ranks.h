// For tests: W gloo ranks as threads of one process, over loopback TCP,
// bootstrapped through one in-process key-value store.
#ifndef DISTOPT_SERVER_COMM_TESTING_GLOO_TEST_RANKS_H_
#define DISTOPT_SERVER_COMM_TESTING_GLOO_TEST_RANKS_H_

#include "gtest/gtest.h"
#include "server/comm/communicator_group.h"
#include "server/comm/testing/gloo_threads.h"

namespace distopt {

// Runs body(group) on `size` ranks at once, each with its CommunicatorGroup
// (subgroups made on first use); returns when all end.
template <typename Body>
void OnGlooGroups(int size, Body body,
                  absl::Duration timeout = absl::Seconds(30)) {
  GlooOptions base;
  base.timeout = timeout;
  absl::Status made = OnGlooThreads(
      size, base,
      [&](Communicator& communicator, const GlooOptions& options,
          RendezvousStore* rendezvous) {
        GlooCommunicatorGroup group(&communicator, options, rendezvous);
        body(group);
      });
  ASSERT_TRUE(made.ok()) << made;
}

// Runs body(communicator) on `size` ranks at once; returns when all end.
template <typename Body>
void OnGlooRanks(int size, Body body) {
  OnGlooGroups(size, [&](CommunicatorGroup& group) { body(group.global()); });
}

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_TESTING_GLOO_TEST_RANKS_H_
