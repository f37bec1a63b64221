// LocalEtcd: Debian's etcd server (/usr/bin/etcd, package etcd-server) as a
// one-member cluster on loopback, in a folder of its own, for the tests of
// the etcd rendezvous. Stopped (and its folder removed) when destroyed.
#ifndef DISTOPT_COMMON_TESTING_LOCAL_ETCD_H_
#define DISTOPT_COMMON_TESTING_LOCAL_ETCD_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace distopt {
namespace testing {

class LocalEtcd {
 public:
  // Starts etcd and waits until it serves clients: FAILED_PRECONDITION
  // when /usr/bin/etcd is missing, UNAVAILABLE when it does not come up.
  static absl::StatusOr<std::unique_ptr<LocalEtcd>> Start();
  ~LocalEtcd();
  LocalEtcd(const LocalEtcd&) = delete;
  LocalEtcd& operator=(const LocalEtcd&) = delete;

  // The client address, "127.0.0.1:port".
  const std::string& endpoint() const { return endpoint_; }
  // "etcd://127.0.0.1:port/<job>".
  std::string Url(const std::string& job) const {
    return "etcd://" + endpoint_ + "/" + job;
  }

  // Stops etcd, removes its data, and starts it again on the same ports:
  // an etcd that lost everything (its disk, or a cluster rebuilt).
  absl::Status RestartEmpty();

 private:
  LocalEtcd() = default;
  // Starts the process on the ports chosen, and waits until it serves.
  absl::Status Run();
  pid_t pid_ = -1;
  std::string folder_;
  std::string endpoint_;
  int peer_port_ = 0;
};

}  // namespace testing
}  // namespace distopt

#endif  // DISTOPT_COMMON_TESTING_LOCAL_ETCD_H_
