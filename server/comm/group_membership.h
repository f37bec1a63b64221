// GroupMembership: a daemon's place in its data-parallel group. Started
// with the daemon when --world_size > 1, it joins in the background: the
// rendezvous store is this daemon's own (rank 0) or rank 0's GroupService
// (--rendezvous, or the first of --peers, which lists the other ranks in
// rank order), and a gloo communicator connects all ranks. Until every rank
// has come (or the timeout passes) the group is JOINING; then READY, or
// FAILED with the reason. Thread-safe.
#ifndef DISTOPT_SERVER_COMM_GROUP_MEMBERSHIP_H_
#define DISTOPT_SERVER_COMM_GROUP_MEMBERSHIP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/comm/communicator.h"
#include "server/comm/communicator_group.h"
#include "server/comm/key_value_store.h"
#include "server/comm/rendezvous_store.h"

namespace distopt {

struct GroupSettings {
  int rank = 0;
  int world_size = 1;
  // Rank 0's GroupService address; empty on rank 0 itself.
  std::string rank0_address;
  // The address this daemon's collective connections bind to.
  std::string hostname = "127.0.0.1";
  absl::Duration timeout = absl::Minutes(5);
  // This daemon's gRPC address as peers reach it, published in the store so
  // that a failed collective can name the rank that no longer answers.
  std::string daemon_address;
};

class GroupMembership {
 public:
  enum class State { kJoining, kReady, kFailed };

  // Starts joining; `local_store` (this daemon's, used on rank 0) must
  // outlive the membership.
  GroupMembership(const GroupSettings& settings, KeyValueStore* local_store);
  ~GroupMembership();
  GroupMembership(const GroupMembership&) = delete;
  GroupMembership& operator=(const GroupMembership&) = delete;

  // Gives up joining, if still joining, and waits for that to end. A
  // daemon stopping calls this while it still serves its store, so that
  // peers in the middle of the rendezvous are not left waiting for it.
  void StopJoining();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  State state() const ABSL_LOCKS_EXCLUDED(mutex_);
  // Why joining failed (OK otherwise).
  absl::Status error() const ABSL_LOCKS_EXCLUDED(mutex_);

  // Waits for the group to be ready, up to `timeout`, and runs `collective`
  // on its communicator; collectives are serialised. FAILED_PRECONDITION
  // when joining failed, UNAVAILABLE while still joining. A collective that
  // fails for want of a peer has the ranks that no longer answer added to
  // its message.
  absl::Status Run(absl::Duration timeout,
                   const std::function<absl::Status(Communicator&)>& collective)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // The group's key-value store (rank 0's), for small records every rank
  // can read: UNAVAILABLE until the group is ready.
  absl::Status Publish(const std::string& key, const std::string& value)
      ABSL_LOCKS_EXCLUDED(mutex_);
  absl::StatusOr<std::string> Lookup(const std::string& key,
                                     absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mutex_);

  // How many ranks share this daemon's host (the host part of the addresses
  // the daemons published at join): torch's default subgroup, the ranks of
  // one node. Waits up to `timeout` for the group, as Run does;
  // FAILED_PRECONDITION when an address is missing or this host's ranks are
  // not one aligned block of contiguous ranks.
  absl::StatusOr<int> RanksOnThisHost(absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mutex_);

  // The same, with the group's subgroups at hand too.
  absl::Status RunInGroup(
      absl::Duration timeout,
      const std::function<absl::Status(CommunicatorGroup&)>& collective)
      ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  void Join(GroupSettings settings, KeyValueStore* local_store);
  absl::Status NameLostRanks(const absl::Status& failure);
  // OK once joined; UNAVAILABLE while still joining after `timeout`;
  // FAILED_PRECONDITION when joining failed.
  absl::Status AwaitReadyLocked(absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const int rank_;
  const int world_size_;
  std::atomic<bool> stopping_{false};
  mutable absl::Mutex mutex_;
  State state_ ABSL_GUARDED_BY(mutex_) = State::kJoining;
  absl::Status error_ ABSL_GUARDED_BY(mutex_);
  std::unique_ptr<RendezvousStore> store_ ABSL_GUARDED_BY(mutex_);
  std::unique_ptr<Communicator> communicator_ ABSL_GUARDED_BY(mutex_);
  GlooOptions gloo_options_ ABSL_GUARDED_BY(mutex_);
  absl::Mutex collective_mutex_;  // One collective at a time.
  std::unique_ptr<GlooCommunicatorGroup> group_
      ABSL_GUARDED_BY(collective_mutex_);
  std::thread joiner_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_GROUP_MEMBERSHIP_H_
