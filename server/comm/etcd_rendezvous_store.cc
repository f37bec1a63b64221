#include "server/comm/etcd_rendezvous_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace distopt {
namespace {

constexpr char kScheme[] = "etcd://";

bool IsJobName(const std::string& job) {
  if (job.empty() || job.size() > 128) return false;
  return std::all_of(job.begin(), job.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
           c == '_' || c == '.';
  });
}

}  // namespace

std::string EtcdRendezvous::Url() const {
  return absl::StrCat(kScheme, endpoint, "/", job);
}

std::string EtcdRendezvous::Prefix() const {
  return absl::StrCat("/distopt/", job, "/");
}

bool IsEtcdUrl(const std::string& flag) {
  return absl::StartsWith(flag, kScheme);
}

absl::StatusOr<EtcdRendezvous> ParseEtcdUrl(const std::string& url,
                                            const std::string& flag_name) {
  auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag_name, "=", url, ": ", why,
                     "; expected etcd://HOST:PORT/JOB (JOB: letters, digits, "
                     "'-', '_', '.')"));
  };
  if (!IsEtcdUrl(url)) return invalid("not an etcd:// address");
  const std::string rest = url.substr(sizeof(kScheme) - 1);
  const size_t slash = rest.find('/');
  if (slash == std::string::npos) return invalid("no job name");
  EtcdRendezvous where;
  where.endpoint = rest.substr(0, slash);
  where.job = rest.substr(slash + 1);
  const size_t colon = where.endpoint.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(where.endpoint.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return invalid("no HOST:PORT of etcd");
  }
  if (!IsJobName(where.job)) return invalid("bad job name");
  return where;
}

EtcdRendezvousStore::EtcdRendezvousStore(std::shared_ptr<EtcdClient> client,
                                         const EtcdRendezvous& where)
    : client_(std::move(client)), url_(where.Url()), prefix_(where.Prefix()) {}

absl::Status EtcdRendezvousStore::Set(const std::string& key,
                                      const std::string& value) {
  return client_->Put(EtcdKey(key), value);
}

absl::StatusOr<std::string> EtcdRendezvousStore::Poll(const std::string& key,
                                                      absl::Time deadline,
                                                      absl::Duration timeout) {
  absl::Duration pause = absl::Milliseconds(2);
  for (;;) {
    // Each look bounded by what is left of the wait.
    absl::StatusOr<std::optional<std::string>> value = client_->Get(
        EtcdKey(key), std::clamp(deadline - absl::Now(), absl::Milliseconds(50),
                                 kEtcdCallTimeout));
    if (value.ok() && value->has_value()) return **std::move(value);
    // An etcd that is down for a moment is waited for like a missing key.
    if (!value.ok() && !absl::IsUnavailable(value.status()) &&
        !absl::IsDeadlineExceeded(value.status())) {
      return value.status();
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      // "not set within": what the collectives read as a timeout.
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous store ", url_, ": key \"", key, "\" not set within ",
          absl::FormatDuration(timeout),
          value.ok() ? "" : absl::StrCat(" (", value.status().message(), ")")));
    }
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(2 * pause, absl::Milliseconds(50));
  }
}

absl::StatusOr<std::string> EtcdRendezvousStore::Get(const std::string& key,
                                                     absl::Duration timeout) {
  return Poll(key, absl::Now() + timeout, timeout);
}

absl::Status EtcdRendezvousStore::Wait(const std::vector<std::string>& keys,
                                       absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> value = Poll(key, deadline, timeout);
    if (!value.ok()) return value.status();
  }
  return absl::OkStatus();
}

absl::Status EtcdRendezvousStore::Delete(const std::string& key) {
  return client_->Delete(EtcdKey(key));
}

}  // namespace distopt
