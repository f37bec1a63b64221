#include "server/comm/etcd_rank_claim.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"

namespace distopt {

std::string RankClaimKey(int rank) { return absl::StrCat("ranks/", rank); }

absl::StatusOr<std::unique_ptr<EtcdRankClaim>> EtcdRankClaim::Acquire(
    EtcdRendezvousStore& store, int rank, const std::string& holder,
    absl::Duration ttl, absl::Duration timeout,
    const std::function<bool()>& cancelled) {
  EtcdClient& etcd = store.client();
  const std::string key = store.EtcdKey(RankClaimKey(rank));
  const absl::Time deadline = absl::Now() + timeout;
  bool said = false;
  for (;;) {
    // A lease per attempt: one granted while the rank was still held would
    // expire unrenewed before the rank is free.
    absl::StatusOr<int64_t> lease = etcd.GrantLease(ttl);
    if (!lease.ok()) return lease.status();
    std::string held_by;
    absl::StatusOr<bool> claimed =
        etcd.PutIfAbsent(key, holder, *lease, &held_by);
    if (claimed.ok() && *claimed) {
      return std::unique_ptr<EtcdRankClaim>(
          new EtcdRankClaim(store, rank, *lease, ttl));
    }
    etcd.RevokeLease(*lease).IgnoreError();
    if (!claimed.ok()) return claimed.status();
    if (!said) {
      log::Info("waiting for the rank to be free",
                {{"rank", rank}, {"held_by", held_by}});
      said = true;
    }
    if (cancelled && cancelled()) {
      return absl::CancelledError(
          absl::StrCat("claiming rank ", rank, ": the daemon is stopping"));
    }
    if (absl::Now() >= deadline) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, " is held by the daemon at ", held_by, " (", key,
          "); expected one daemon per rank: a replacement takes the rank "
          "once the daemon holding it has stopped (a killed daemon's hold "
          "expires ",
          absl::FormatDuration(ttl), " after its last renewal)"));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

EtcdRankClaim::EtcdRankClaim(EtcdRendezvousStore& store, int rank,
                             int64_t lease, absl::Duration ttl)
    : store_(store), rank_(rank), lease_(lease), ttl_(ttl), keeper_([this] {
        KeepAlive();
      }) {}

EtcdRankClaim::~EtcdRankClaim() {
  stop_.Notify();
  keeper_.join();
  if (!lost_) store_.client().RevokeLease(lease_).IgnoreError();
}

void EtcdRankClaim::KeepAlive() {
  const absl::Duration period = ttl_ / 3;
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    absl::Status renewed = store_.client().KeepAlive(lease_);
    if (renewed.ok()) continue;
    if (absl::IsNotFound(renewed)) {
      lost_ = true;
      log::Error("this daemon's hold on its rank expired",
                 {{"rank", rank_}, {"error", renewed.message()}});
      return;
    }
    log::Warning("renewing the hold on the rank failed",
                 {{"rank", rank_}, {"error", renewed.message()}});
  }
}

}  // namespace distopt
