// GroupMembership: a daemon's place in its data-parallel group. Started
// with the daemon when --world_size > 1, it joins in the background: the
// rendezvous store is this daemon's own (rank 0) or rank 0's GroupService
// (--rendezvous, or the first of --peers, which lists the other ranks in
// rank order), and a gloo communicator connects all ranks. Until every rank
// has come (or the timeout passes) the group is JOINING; then READY, or
// FAILED with the reason.
//
// Rounds. The communicator of one round breaks for good when one of its
// collectives fails (gloo closes the connections of a rank whose collective
// timed out, and the peers' next collectives fail at once). The group then
// says FAILED, with the collective and the rank that failed, until it is
// re-formed: a new round, connected afresh through the rendezvous store,
// with the same ranks. Reform() does it on demand (every rank calls it);
// RunInGroup does it by itself, first, when its own round is known to have
// failed, and once more when a call's first collective finds the round
// broken by a peer (nothing has changed then, so the call can run again).
//
// Replacement. With the store in etcd (--rendezvous=etcd://HOST:PORT/JOB)
// every rank holds its rank there (EtcdRankClaim) and the group's records
// outlive any rank: a daemon started with the rank of one that died joins
// the round after the highest any rank reached, which is the round the
// other ranks re-form as (by Reform, or by themselves in their next group
// call). Every rank publishes an incarnation (its address, pid and start)
// at join; a round whose ranks' incarnations differ from the previous
// round's records the replacement (replacements()), and the group call
// that re-formed it is not run: the group's optimizers were made with the
// old daemon and must be made again (see replacement_count()).
//
// Every collective of a call is bounded by the timeout that call gives.
// Thread-safe; collectives are serialised.
#ifndef DISTOPT_SERVER_COMM_GROUP_MEMBERSHIP_H_
#define DISTOPT_SERVER_COMM_GROUP_MEMBERSHIP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/device.h"
#include "server/comm/communicator.h"
#include "server/comm/communicator_group.h"
#include "server/comm/etcd_rank_claim.h"
#include "server/comm/key_value_store.h"
#include "server/comm/rendezvous_store.h"

namespace distopt {

class RoundCommunicator;

struct GroupSettings {
  int rank = 0;
  int world_size = 1;
  // Rank 0's GroupService address; empty on rank 0 itself.
  std::string rank0_address;
  // What every rank presents to rank 0's store (--group_secret_file).
  std::string secret;
  // The address this daemon's collective connections bind to.
  std::string hostname = "127.0.0.1";
  // For joining (--group_timeout).
  absl::Duration timeout = absl::Minutes(5);
  // This daemon's gRPC address as peers reach it, published in the store so
  // that a failed collective can name the rank that no longer answers.
  std::string daemon_address;
  // Told each new state, whether it is READY (the daemon's health follows
  // it); called with no lock but the collective one held.
  std::function<void(bool ready)> on_ready_changed;
  // etcd://HOST:PORT/JOB: the group's store is in etcd, on rank 0 too, and
  // this daemon holds its rank there; empty: rank 0's store.
  std::string etcd_rendezvous;
  // How long the rank of a daemon that was killed stays held in etcd.
  absl::Duration rank_hold_ttl = absl::Seconds(5);
  // Where this daemon's parameters live (--device): with the other ranks'
  // it decides what carries the group's tensors (tensor_backend.h).
  Device device = Device::Cpu();
};

// A rank whose daemon was replaced by another between two rounds.
struct RankReplacement {
  int rank = 0;
  std::string previous_address;
  std::string address;
  int64_t round = 0;  // The first round with the new daemon.
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

  // Gives up joining (and any re-formation), and waits for joining to end.
  // A daemon stopping calls this while it still serves its store, so that
  // peers in the middle of the rendezvous are not left waiting for it.
  void StopJoining();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  State state() const ABSL_LOCKS_EXCLUDED(mutex_);
  // Why joining or the current round failed (OK otherwise).
  absl::Status error() const ABSL_LOCKS_EXCLUDED(mutex_);
  // The round of the communicator: 0 after joining, +1 per re-formation.
  int64_t round() const ABSL_LOCKS_EXCLUDED(mutex_);
  // The ranks that no longer answered when a collective last failed for
  // want of a peer (empty until one did).
  std::vector<int> lost_ranks() const ABSL_LOCKS_EXCLUDED(mutex_);
  // The replacements this daemon saw, oldest first, and how many: an
  // optimizer made when the count was another must be made again.
  std::vector<RankReplacement> replacements() const ABSL_LOCKS_EXCLUDED(mutex_);
  int64_t replacement_count() const ABSL_LOCKS_EXCLUDED(mutex_);
  // What carries the group's tensors since the last round connected:
  // "gloo", "nccl" or "gloo-staged" (tensor_backend.h); empty before.
  std::string tensor_backend() const ABSL_LOCKS_EXCLUDED(mutex_);
  // Collective, on the ranks whose optimizers were made before: when a
  // rank's daemon in etcd is not the one this daemon last connected with,
  // or that one no longer accepts connections (its replacement may still
  // be waiting for the rank), re-forms the group (every rank calls it, or
  // another group call) and returns true once a replacement is recorded.
  // False, doing nothing, otherwise.
  absl::StatusOr<bool> CatchUpWithReplacements(absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mutex_, collective_mutex_);

  // Waits for the group to be ready, up to `timeout`, and runs `collective`
  // on its communicators, every collective bounded by `timeout`;
  // collectives are serialised. A failed round is re-formed first (see
  // above). FAILED_PRECONDITION when joining failed or the round cannot be
  // re-formed, UNAVAILABLE while still joining. A collective that fails for
  // want of a peer has the ranks that no longer answer added to its
  // message, and marks the round failed.
  absl::Status RunInGroup(
      absl::Duration timeout,
      const std::function<absl::Status(CommunicatorGroup&)>& collective)
      ABSL_LOCKS_EXCLUDED(mutex_, collective_mutex_);
  // The same on the whole group's communicator. Optimizers may keep the
  // communicator a call gives them: it stays valid across rounds.
  absl::Status Run(absl::Duration timeout,
                   const std::function<absl::Status(Communicator&)>& collective)
      ABSL_LOCKS_EXCLUDED(mutex_, collective_mutex_);

  // Collective (every rank calls it): connects a new round of the group,
  // after the highest round any rank reached, whatever the state of the
  // current one (or of joining, when it failed); the old round's
  // communicator is dropped. FAILED_PRECONDITION naming the ranks that did
  // not come within `timeout` (the group then stays FAILED).
  absl::Status Reform(absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mutex_, collective_mutex_);

  // The group's key-value store (rank 0's), for small records every rank
  // can read: UNAVAILABLE until the group has joined.
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

 private:
  void Join(GroupSettings settings, KeyValueStore* local_store);
  // Opens the group's store unless it is open: this daemon's, rank 0's,
  // or etcd, where this daemon's rank is claimed first (claim_).
  absl::Status OpenStoreLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(collective_mutex_);
  bool etcd() const { return etcd_; }
  // Writes this rank's keys (incarnation, address, world size, round) to
  // etcd again, after its hold there expired and was taken again: false
  // when a write failed (asked again at the next renewal).
  bool PublishAgain() ABSL_LOCKS_EXCLUDED(mutex_);
  // The highest round any rank connected (-1: none yet).
  int64_t HighestRound(RendezvousStore& store) const;
  // Through rank 0's store (no etcd), a group only forms whole: a daemon
  // of rank R > 0 that finds a round already connected there is a restart
  // of a rank that died, which no rank can meet (FAILED_PRECONDITION
  // saying what to do instead). OK when the store is not up yet.
  absl::Status CheckNotARestart(RendezvousStore& store) const;
  // `failure` to connect, or FAILED_PRECONDITION naming each rank the
  // store says was started with another --world_size (gloo's own message
  // only compares the lengths of the ranks' address lists).
  absl::Status NameOtherWorldSizes(RendezvousStore& store,
                                   const absl::Status& failure) const;
  // After round `round` connected: the ranks' incarnations, and the
  // replacements since the previous round (with etcd only).
  void NoteMembersLocked(int64_t round)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(collective_mutex_)
          ABSL_LOCKS_EXCLUDED(mutex_);
  // FAILED_PRECONDITION for a call not run because the round re-formed for
  // it brought replacements after the `before`-th.
  absl::Status ReplacedSince(int64_t before) const ABSL_LOCKS_EXCLUDED(mutex_);
  // Connects round `round` through the store and makes it the group's; on
  // failure removes this rank's rendezvous key, so that a later attempt is
  // not read stale.
  absl::Status ConnectLocked(int64_t round, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(collective_mutex_);
  absl::Status ReformLocked(absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(collective_mutex_);
  void MarkFailed(const absl::Status& failure)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(collective_mutex_)
          ABSL_LOCKS_EXCLUDED(mutex_);
  void SetState(State state, absl::Status error) ABSL_LOCKS_EXCLUDED(mutex_);
  absl::Status NameLostRanks(const absl::Status& failure);
  // OK once joined (the round may have failed since); UNAVAILABLE while
  // still joining after `timeout`; FAILED_PRECONDITION when joining failed.
  absl::Status AwaitJoinedLocked(absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const int rank_;
  const int world_size_;
  const bool etcd_;
  // This daemon's incarnation: its address, pid and start.
  const std::string incarnation_;
  std::atomic<bool> stopping_{false};
  std::function<void(bool)> on_ready_changed_;
  mutable absl::Mutex mutex_;
  State state_ ABSL_GUARDED_BY(mutex_) = State::kJoining;
  absl::Status error_ ABSL_GUARDED_BY(mutex_);
  bool joined_ ABSL_GUARDED_BY(mutex_) = false;
  int64_t round_ ABSL_GUARDED_BY(mutex_) = 0;
  // The highest round this rank connected (-1: none yet), as written to
  // the store before round_ moves on.
  int64_t reached_round_ ABSL_GUARDED_BY(mutex_) = -1;
  std::vector<int> lost_ranks_ ABSL_GUARDED_BY(mutex_);
  std::unique_ptr<RendezvousStore> store_ ABSL_GUARDED_BY(mutex_);
  GroupSettings settings_ ABSL_GUARDED_BY(mutex_);
  // Held while a collective (or a rendezvous) runs; mutex_ may be taken
  // under it, never the other way round.
  absl::Mutex collective_mutex_ ABSL_ACQUIRED_BEFORE(mutex_);
  // Stable across rounds: optimizers keep it; it forwards to the round's.
  std::unique_ptr<RoundCommunicator> global_;
  std::unique_ptr<GlooCommunicatorGroup> group_
      ABSL_GUARDED_BY(collective_mutex_);
  bool round_failed_ ABSL_GUARDED_BY(collective_mutex_) = false;
  KeyValueStore* local_store_ ABSL_GUARDED_BY(mutex_) = nullptr;
  // Every rank's incarnation and address, from the last round.
  std::vector<std::string> incarnations_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mutex_);
  std::vector<RankReplacement> replacements_ ABSL_GUARDED_BY(mutex_);
  std::string tensor_backend_ ABSL_GUARDED_BY(mutex_);
  // This daemon's hold on its rank in etcd (after store_: it uses it).
  std::unique_ptr<EtcdRankClaim> claim_ ABSL_GUARDED_BY(collective_mutex_);
  std::thread joiner_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_GROUP_MEMBERSHIP_H_
