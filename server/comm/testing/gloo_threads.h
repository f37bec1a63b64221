// W gloo ranks as threads of one process, over loopback TCP, bootstrapped
// through one in-process key-value store: for tests (gloo_test_ranks.h)
// and for the benchmarks' limit lines.
#ifndef DISTOPT_SERVER_COMM_TESTING_GLOO_THREADS_H_
#define DISTOPT_SERVER_COMM_TESTING_GLOO_THREADS_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "server/comm/gloo_communicator.h"
#include "server/comm/key_value_store.h"
#include "server/comm/rendezvous_store.h"

namespace distopt {

// Runs body(communicator, options, rendezvous) on `size` ranks at once,
// each with its options (`base` with its rank and the size); returns when
// all end: OK, or the first rank's error in making its communicator.
template <typename Body>
absl::Status OnGlooThreads(int size, const GlooOptions& base, Body body) {
  KeyValueStore store;
  LocalRendezvousStore rendezvous(&store);
  std::vector<absl::Status> made(size);
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      GlooOptions options = base;
      options.rank = r;
      options.size = size;
      absl::StatusOr<std::unique_ptr<Communicator>> communicator =
          CreateGlooCommunicator(options, &rendezvous);
      made[r] = communicator.status();
      if (communicator.ok()) body(**communicator, options, &rendezvous);
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (const absl::Status& status : made) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_TESTING_GLOO_THREADS_H_
