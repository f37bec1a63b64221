// RemoteRendezvousStore: a RendezvousStore on another daemon's
// GroupService (rank 0's, for a group), so that ranks in different
// processes bootstrap their collectives through one store. Every call has a
// deadline. Thread-safe.
#ifndef DISTOPT_SERVER_COMM_REMOTE_RENDEZVOUS_STORE_H_
#define DISTOPT_SERVER_COMM_REMOTE_RENDEZVOUS_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "proto/distopt/v1/group.grpc.pb.h"
#include "server/comm/rendezvous_store.h"

namespace distopt {

class RemoteRendezvousStore : public RendezvousStore {
 public:
  // `address` is the daemon holding the store ("host:port").
  explicit RemoteRendezvousStore(const std::string& address);

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;

 private:
  const std::string address_;
  std::unique_ptr<v1::GroupService::Stub> stub_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_REMOTE_RENDEZVOUS_STORE_H_
