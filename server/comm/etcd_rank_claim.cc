#include "server/comm/etcd_rank_claim.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/quoted.h"

namespace distopt {
namespace {

// etcd not answering for a moment is waited out like a held rank.
bool Transient(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

}  // namespace

std::string RankClaimKey(int rank) { return absl::StrCat("ranks/", rank); }

absl::StatusOr<int64_t> EtcdRankClaim::TryClaim(EtcdRendezvousStore& store,
                                                int rank,
                                                const std::string& holder,
                                                absl::Duration ttl,
                                                std::string* held_by) {
  EtcdClient& etcd = store.client();
  const std::string key = store.EtcdKey(RankClaimKey(rank));
  // A read first: waiting for a held rank writes nothing to etcd.
  absl::StatusOr<std::optional<std::string>> holder_now = etcd.Get(key);
  if (!holder_now.ok()) return holder_now.status();
  // Whoever can write to etcd can put anything there: the holder is
  // quoted (escaped, and cut when long) wherever it is said.
  if (holder_now->has_value()) {
    *held_by = Quoted(**holder_now);
    return 0;
  }
  // A lease per attempt: one granted while the rank was still held would
  // expire unrenewed before the rank is free.
  absl::StatusOr<int64_t> lease = etcd.GrantLease(ttl);
  if (!lease.ok()) return lease.status();
  absl::StatusOr<bool> claimed = etcd.PutIfAbsent(key, holder, *lease, held_by);
  if (claimed.ok() && *claimed) return *lease;
  etcd.RevokeLease(*lease).IgnoreError();
  if (!claimed.ok()) return claimed.status();
  *held_by = Quoted(*held_by);
  return 0;  // Held by *held_by.
}

absl::StatusOr<std::unique_ptr<EtcdRankClaim>> EtcdRankClaim::Acquire(
    EtcdRendezvousStore& store, int rank, const std::string& holder,
    absl::Duration ttl, absl::Duration timeout,
    const std::function<bool()>& cancelled) {
  const absl::Time deadline = absl::Now() + timeout;
  bool said = false;
  absl::Status last;
  for (;;) {
    std::string held_by;
    absl::StatusOr<int64_t> lease =
        TryClaim(store, rank, holder, ttl, &held_by);
    if (lease.ok() && *lease != 0) {
      return std::unique_ptr<EtcdRankClaim>(
          new EtcdRankClaim(store, rank, holder, *lease, ttl));
    }
    if (!lease.ok() && !Transient(lease.status())) return lease.status();
    if (lease.ok()) {
      last = absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, " is held by the daemon at ", held_by, " (",
          store.EtcdKey(RankClaimKey(rank)),
          "); expected one daemon per rank: a replacement takes the rank "
          "once the daemon holding it has stopped (a killed daemon's hold "
          "expires ",
          absl::FormatDuration(ttl), " after its last renewal)"));
      if (!said) {
        log::Info("waiting for the rank to be free",
                  {{"rank", rank}, {"held_by", held_by}});
        said = true;
      }
    } else {
      last = lease.status();
    }
    if (cancelled && cancelled()) {
      return absl::CancelledError(
          absl::StrCat("claiming rank ", rank, ": the daemon is stopping"));
    }
    if (absl::Now() >= deadline) return last;
    absl::SleepFor(absl::Milliseconds(200));
  }
}

EtcdRankClaim::EtcdRankClaim(EtcdRendezvousStore& store, int rank,
                             std::string holder, int64_t lease,
                             absl::Duration ttl)
    : store_(store),
      rank_(rank),
      holder_(std::move(holder)),
      ttl_(ttl),
      lease_(lease),
      keeper_([this] { KeepAlive(); }) {}

EtcdRankClaim::~EtcdRankClaim() {
  stop_.Notify();
  keeper_.join();
  // Bounded: a daemon stopping while etcd is gone leaves the hold to expire.
  if (!lost_) {
    store_.client().RevokeLease(lease_, absl::Seconds(1)).IgnoreError();
  }
}

void EtcdRankClaim::WhenTakenAgain(std::function<bool()> republish) {
  absl::MutexLock lock(&mutex_);
  republish_ = std::move(republish);
}

void EtcdRankClaim::KeepAlive() {
  const absl::Duration period = ttl_ / 3;
  // Set once the hold was taken again, until the daemon's other keys are
  // written again.
  bool republish_pending = false;
  auto republish = [&] {
    std::function<bool()> call;
    {
      absl::MutexLock lock(&mutex_);
      call = republish_;
    }
    republish_pending = call && !call();
  };
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    // A renewal that takes longer than its period is as good as lost.
    absl::Status renewed = store_.client().KeepAlive(
        lease_, std::max(period, absl::Milliseconds(500)));
    if (renewed.ok()) {
      if (republish_pending) republish();
      continue;
    }
    if (!absl::IsNotFound(renewed)) {
      log::Warning("renewing the hold on the rank failed",
                   {{"rank", rank_}, {"error", renewed.message()}});
      continue;
    }
    // Expired (etcd unreachable past the ttl, or this daemon stalled):
    // the rank is this daemon's again unless another daemon took it.
    std::string held_by;
    absl::StatusOr<int64_t> lease =
        TryClaim(store_, rank_, holder_, ttl_, &held_by);
    if (lease.ok() && *lease != 0) {
      log::Warning("the hold on the rank expired and was taken again",
                   {{"rank", rank_}});
      lease_ = *lease;
      republish();
      continue;
    }
    if (lease.ok()) {
      log::Error("this daemon's rank was taken by another daemon",
                 {{"rank", rank_}, {"held_by", held_by}});
      lost_ = true;
      return;
    }
    log::Warning("taking the rank again failed",
                 {{"rank", rank_}, {"error", lease.status().message()}});
  }
}

}  // namespace distopt
