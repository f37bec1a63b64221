// GlooCommunicator: collectives over TCP with gloo (Debian's libgloo),
// bootstrapped through a RendezvousStore. gloo reports failures with
// exceptions; they stop here and come back as absl::Status (DEADLINE_EXCEEDED
// for a timeout, UNAVAILABLE for a lost peer).
#ifndef DISTOPT_SERVER_COMM_GLOO_COMMUNICATOR_H_
#define DISTOPT_SERVER_COMM_GLOO_COMMUNICATOR_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/comm/communicator.h"
#include "server/comm/rendezvous_store.h"

namespace distopt {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // The address this rank's TCP pairs bind to.
  std::string hostname = "127.0.0.1";
  // Keys in the store are prefixed, so several groups can share one store.
  std::string prefix = "gloo";
  // For the rendezvous and for every collective.
  absl::Duration timeout = absl::Seconds(30);
  // Polled while waiting for peers at the rendezvous: true gives up
  // (CANCELLED), so a daemon shutting down need not wait out the timeout.
  std::function<bool()> cancelled;
  // All-reduces of at least this many bytes run as the ring reduce-scatter
  // then all-gather (the chunked ring pipelines its additions with the
  // transfer, and measured faster than gloo's own all-reduce on large
  // arrays); smaller ones, and all with 0, use gloo's all-reduce.
  size_t ring_all_reduce_min_bytes = size_t{1} << 20;
};

// Connects to every other rank (all ranks call this together).
//
// Subgroups, as torch's dist.new_subgroups: contiguous blocks of
// `subgroup_size` ranks; CreateGlooSubgroup connects this rank to the other
// members of its block (every rank calls it together, with the same size).
struct SubgroupOptions {
  int subgroup_size = 1;
};
// INVALID_ARGUMENT for a rank outside [0, size); DEADLINE_EXCEEDED when
// peers do not show up within the timeout.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    const GlooOptions& options, RendezvousStore* store);

// The store key under which gloo's rendezvous keeps this rank's addresses.
std::string GlooRendezvousKey(const GlooOptions& options);

// This rank's subgroup: ranks [b * size, (b + 1) * size) of the group, with
// ranks renumbered from 0. INVALID_ARGUMENT when the group's size is not a
// multiple of the subgroup size.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooSubgroup(
    const GlooOptions& group, const SubgroupOptions& subgroup,
    RendezvousStore* store);

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_GLOO_COMMUNICATOR_H_
