// Hosts on one machine: network namespaces, each with its own address on a
// bridge this object creates (and removes when destroyed), so that daemons
// started in them are on different hosts as far as their addresses say,
// and a host's link can be cut or slowed. Needs root (CAP_NET_ADMIN and
// CAP_SYS_ADMIN) and the `ip` and `tc` tools (iproute2).
//
// Host h (0-based) is 10.77.X.(11 + h)/24 in namespace "dopt<pid>x<n>h<h>";
// the bridge, in the test's own namespace, is 10.77.X.1, so the test (the
// trainer) reaches every host. X is the first subnet no other instance
// uses (picked under a lock file). Names carry the test's pid: two tests
// never share them, and the leftovers of a run that died (its pid gone)
// are removed by the next.
#ifndef DISTOPT_TESTS_VIRTUAL_HOSTS_H_
#define DISTOPT_TESTS_VIRTUAL_HOSTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace distopt {
namespace testing {

class VirtualHosts {
 public:
  // FAILED_PRECONDITION naming the command that failed and what it said.
  static absl::StatusOr<std::unique_ptr<VirtualHosts>> Create(int hosts);
  ~VirtualHosts();
  VirtualHosts(const VirtualHosts&) = delete;
  VirtualHosts& operator=(const VirtualHosts&) = delete;

  int size() const { return hosts_; }
  // "10.77.X.11", ...
  std::string Address(int host) const;
  // The launcher that runs a program on `host` (LocalWorkerOptions).
  std::vector<std::string> Launcher(int host) const;
  // Takes the host's link down (or up again): nothing reaches it or
  // leaves it, as when its cable is pulled.
  absl::Status SetLink(int host, bool up);
  // Limits what the host sends to `megabits` per second (tc tbf on its
  // side of the link); 0 lifts the limit.
  absl::Status LimitBandwidth(int host, int megabits);

  // Whether this process may make them: root, and `ip netns` works.
  static bool Possible(std::string* why_not);

 private:
  explicit VirtualHosts(int hosts);
  std::string Namespace(int host) const;
  std::string BridgeSide(int host) const;

  const int hosts_;
  const std::string prefix_;
  std::string subnet_;  // "10.77.X"
  bool bridge_made_ = false;
  int namespaces_made_ = 0;
};

}  // namespace testing
}  // namespace distopt

#endif  // DISTOPT_TESTS_VIRTUAL_HOSTS_H_
