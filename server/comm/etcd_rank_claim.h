// EtcdRankClaim: a daemon's hold on its rank of a job in etcd, so that two
// live daemons never serve one rank, and the rank of a daemon that died is
// free for its replacement once the dead daemon's claim expires. The claim
// is the key ranks/<rank> put under a lease of `ttl`, which a thread renews
// every ttl/3; a daemon that stops gracefully revokes the lease (the rank is
// free at once), one that is killed leaves it to expire after `ttl`. While
// etcd does not answer, the claim is waited for (up to the timeout) and
// renewed again and again.
// Thread-safe.
#ifndef DISTOPT_SERVER_COMM_ETCD_RANK_CLAIM_H_
#define DISTOPT_SERVER_COMM_ETCD_RANK_CLAIM_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/comm/etcd_rendezvous_store.h"

namespace distopt {

class EtcdRankClaim {
 public:
  // Claims `rank` for `holder` (this daemon's address), waiting up to
  // `timeout` while another daemon holds it; FAILED_PRECONDITION naming
  // the holder after that, CANCELLED as soon as `cancelled` says so.
  static absl::StatusOr<std::unique_ptr<EtcdRankClaim>> Acquire(
      EtcdRendezvousStore& store, int rank, const std::string& holder,
      absl::Duration ttl, absl::Duration timeout,
      const std::function<bool()>& cancelled);
  // Revokes the lease: the rank is free at once.
  ~EtcdRankClaim();
  EtcdRankClaim(const EtcdRankClaim&) = delete;
  EtcdRankClaim& operator=(const EtcdRankClaim&) = delete;

  // True once another daemon holds the rank: this one's hold expired (etcd
  // unreachable, or this daemon stalled, for longer than the ttl) and a
  // replacement took it. An expired hold nobody took is taken again.
  bool lost() const { return lost_.load(); }

  // Called (on the renewing thread) when an expired hold was taken again,
  // and at each renewal after until it returns true: etcd may have lost
  // more than the hold (restarted empty), so whatever else the daemon
  // keeps there is to be written again.
  void WhenTakenAgain(std::function<bool()> republish)
      ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  EtcdRankClaim(EtcdRendezvousStore& store, int rank, std::string holder,
                int64_t lease, absl::Duration ttl);
  // Puts the claim under a new lease: its id, or 0 when another daemon
  // holds the rank (named in *held_by).
  static absl::StatusOr<int64_t> TryClaim(EtcdRendezvousStore& store, int rank,
                                          const std::string& holder,
                                          absl::Duration ttl,
                                          std::string* held_by);
  void KeepAlive();

  EtcdRendezvousStore& store_;
  const int rank_;
  const std::string holder_;
  const absl::Duration ttl_;
  int64_t lease_;  // The keeper's, and the destructor's after it.
  std::atomic<bool> lost_{false};
  absl::Mutex mutex_;
  std::function<bool()> republish_ ABSL_GUARDED_BY(mutex_);
  absl::Notification stop_;
  std::thread keeper_;
};

// The key under which a rank's claim lives (ranks/<rank>).
std::string RankClaimKey(int rank);

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_ETCD_RANK_CLAIM_H_
