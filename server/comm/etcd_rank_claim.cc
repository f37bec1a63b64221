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
  absl::StatusOr<int64_t> lease = store.client().GrantLease(ttl);
  if (!lease.ok()) return lease.status();
  const std::string key = store.EtcdKey(RankClaimKey(rank));
  const absl::Time deadline = absl::Now() + timeout;
  bool said = false;
  for (;;) {
    std::string held_by;
    absl::StatusOr<bool> claimed =
        store.client().PutIfAbsent(key, holder, *lease, &held_by);
    if (claimed.ok() && *claimed) {
      return std::unique_ptr<EtcdRankClaim>(
          new EtcdRankClaim(store, rank, *lease, ttl));
    }
    absl::Status failed =
        claimed.ok()
            ? absl::FailedPreconditionError(absl::StrCat(
                  "rank ", rank, " is held by the daemon at ", held_by, " (",
                  key,
                  "); expected one daemon per rank: a replacement takes "
                  "the rank once the daemon holding it has stopped (a "
                  "killed daemon's hold expires ",
                  absl::FormatDuration(ttl), " after its last renewal)"))
            : claimed.status();
    if (claimed.ok() && !said) {
      log::Info("waiting for the rank to be free",
                {{"rank", rank}, {"held_by", held_by}});
      said = true;
    }
    if (absl::Now() >= deadline || (cancelled && cancelled())) {
      store.client().RevokeLease(*lease).IgnoreError();
      if (cancelled && cancelled()) {
        return absl::CancelledError(
            absl::StrCat("claiming rank ", rank, ": the daemon is stopping"));
      }
      return failed;
    }
    absl::SleepFor(absl::Milliseconds(100));
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
