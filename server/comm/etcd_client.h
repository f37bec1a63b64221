// EtcdClient: the calls distopt makes to an etcd v3 cluster over etcd's own
// gRPC API (proto/etcd/etcdserverpb/rpc.proto): get, put and delete a key,
// list the keys under a prefix, put a key only where none is (a
// transaction), and leases, which etcd expires (deleting the keys put under
// them) unless they are kept alive. Every call has a deadline (`timeout`,
// 2 s unless given), waits within it for an etcd that is starting or
// reconnecting, and names the endpoint in its errors. Thread-safe.
#ifndef DISTOPT_SERVER_COMM_ETCD_CLIENT_H_
#define DISTOPT_SERVER_COMM_ETCD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/etcd/etcdserverpb/rpc.grpc.pb.h"

namespace distopt {

// A call's deadline unless it says otherwise: etcd answers in
// milliseconds, and a caller with a deadline of its own (a rendezvous, a
// daemon stopping) must not wait much past it.
inline constexpr absl::Duration kEtcdCallTimeout = absl::Seconds(2);

class EtcdClient {
 public:
  // `endpoint` is an etcd member's client address, "host:port".
  explicit EtcdClient(const std::string& endpoint);

  const std::string& endpoint() const { return endpoint_; }

  // `lease` 0: the key stays until deleted.
  absl::Status Put(const std::string& key, const std::string& value,
                   int64_t lease = 0);
  // nullopt when the key is not set.
  absl::StatusOr<std::optional<std::string>> Get(
      const std::string& key, absl::Duration timeout = kEtcdCallTimeout);
  // Every key under `prefix` with its value, in key order.
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> List(
      const std::string& prefix);
  absl::Status Delete(const std::string& key);
  // Puts the key if it is not set, atomically: true then; false when it is
  // set, with its value in *holder.
  absl::StatusOr<bool> PutIfAbsent(const std::string& key,
                                   const std::string& value, int64_t lease,
                                   std::string* holder);

  // A lease of `ttl` (whole seconds, at least 1): its id.
  absl::StatusOr<int64_t> GrantLease(absl::Duration ttl);
  // Renews the lease once; NOT_FOUND when it has expired.
  absl::Status KeepAlive(int64_t lease,
                         absl::Duration timeout = kEtcdCallTimeout);
  // Ends the lease now, deleting its keys.
  absl::Status RevokeLease(int64_t lease,
                           absl::Duration timeout = kEtcdCallTimeout);

 private:
  std::unique_ptr<grpc::ClientContext> Context(
      absl::Duration timeout = kEtcdCallTimeout) const;
  absl::Status Annotate(const grpc::Status& status, const char* call) const;

  const std::string endpoint_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease_;
};

// The end of the key range that holds exactly the keys starting with
// `prefix` (etcd's range_end: the prefix with its last byte + 1).
std::string EtcdPrefixEnd(const std::string& prefix);

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_ETCD_CLIENT_H_
