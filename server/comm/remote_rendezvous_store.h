// RemoteRendezvousStore: a RendezvousStore on another daemon's
// GroupService (rank 0's, for a group), so that ranks in different
// processes bootstrap their collectives through one store. Every call
// carries the group's secret and has a deadline. Thread-safe.
#ifndef DISTOPT_SERVER_COMM_REMOTE_RENDEZVOUS_STORE_H_
#define DISTOPT_SERVER_COMM_REMOTE_RENDEZVOUS_STORE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "proto/distopt/v1/group.grpc.pb.h"
#include "server/comm/rendezvous_store.h"

namespace distopt {

class RemoteRendezvousStore : public RendezvousStore {
 public:
  // `address` is the daemon holding the store ("host:port"); `secret` is
  // the group's (see GroupService).
  RemoteRendezvousStore(const std::string& address, std::string secret);

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;
  absl::Status Delete(const std::string& key) override;

 private:
  // A call's context: the secret, and a deadline `timeout` from now.
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;

  const std::string address_;
  const std::string secret_;
  std::unique_ptr<v1::GroupService::Stub> stub_;
  // Whether the store's daemon has answered once. Until then a Wait waits
  // for it to come up (ranks start in any order); after, a store that no
  // longer answers (rank 0 died) fails the call at once instead of at
  // its deadline, so that a group call returns within its own timeout.
  std::atomic<bool> answered_{false};
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_REMOTE_RENDEZVOUS_STORE_H_
