// EtcdRendezvousStore: a group's rendezvous store in etcd
// (--rendezvous=etcd://HOST:PORT/JOB), instead of rank 0's daemon, so that
// no rank is the group's single point of failure: every rank, rank 0 too,
// can die and be replaced while the group's records (addresses, rounds,
// who holds which rank) live on. Keys live under /distopt/JOB/. Waiting
// for a key polls it, backing off from 2 ms to 50 ms: the keys a group
// waits for are few and short-lived, and polling needs no watch stream to
// restart when etcd fails over. Thread-safe.
#ifndef DISTOPT_SERVER_COMM_ETCD_RENDEZVOUS_STORE_H_
#define DISTOPT_SERVER_COMM_ETCD_RENDEZVOUS_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/comm/etcd_client.h"
#include "server/comm/rendezvous_store.h"

namespace distopt {

// Where an etcd rendezvous is: the member's address and the job's name.
struct EtcdRendezvous {
  std::string endpoint;  // "host:port"
  std::string job;
  // "etcd://host:port/job", as given.
  std::string Url() const;
  // The keys' prefix: "/distopt/<job>/".
  std::string Prefix() const;
};

// Whether `flag` names an etcd rendezvous (starts with "etcd://").
bool IsEtcdUrl(const std::string& flag);
// INVALID_ARGUMENT naming `flag_name` and the expected form for anything
// but etcd://HOST:PORT/JOB, JOB of letters, digits, '-', '_' and '.'.
absl::StatusOr<EtcdRendezvous> ParseEtcdUrl(const std::string& url,
                                            const std::string& flag_name);

class EtcdRendezvousStore : public RendezvousStore {
 public:
  EtcdRendezvousStore(std::shared_ptr<EtcdClient> client,
                      const EtcdRendezvous& where);

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;
  absl::Status Delete(const std::string& key) override;

  EtcdClient& client() { return *client_; }
  // The etcd key of a store key.
  std::string EtcdKey(const std::string& key) const { return prefix_ + key; }

 private:
  // The key's value once set; DEADLINE_EXCEEDED at `deadline` (`timeout`
  // after the wait began).
  absl::StatusOr<std::string> Poll(const std::string& key, absl::Time deadline,
                                   absl::Duration timeout);

  const std::shared_ptr<EtcdClient> client_;
  const std::string url_;
  const std::string prefix_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_ETCD_RENDEZVOUS_STORE_H_
