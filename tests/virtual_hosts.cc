#include "tests/virtual_hosts.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace distopt {
namespace testing {
namespace {

constexpr char kIp[] = "/usr/sbin/ip";
constexpr char kTc[] = "/usr/sbin/tc";

// Runs `command` (a shell line); FAILED_PRECONDITION with its output when
// it fails.
absl::Status Run(const std::string& command, std::string* output = nullptr) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("cannot run ", command));
  }
  std::string text;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) text += buffer;
  const int status = pclose(pipe);
  if (output != nullptr) *output = text;
  if (status != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(command, " failed: ", text));
  }
  return absl::OkStatus();
}

// The pid in a name "dopt<pid>...", or 0.
int PidIn(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "dopt")) return 0;
  int pid = 0;
  while (!name.empty() && absl::ascii_isdigit(name[0])) {
    pid = pid * 10 + (name[0] - '0');
    name.remove_prefix(1);
  }
  return pid;
}

int NextInstance() {
  static std::atomic<int> instances{0};
  return instances++;
}

bool Alive(int pid) { return kill(pid, 0) == 0 || errno == EPERM; }

// Removes what runs of this test that died left behind (their pid is
// gone), and returns the third byte of the 10.77.x.0/24 subnets in use.
std::set<int> CleanUpAndListSubnets() {
  std::string listed;
  Run(absl::StrCat(kIp, " netns list"), &listed).IgnoreError();
  for (absl::string_view line : absl::StrSplit(listed, '\n')) {
    const std::string name(line.substr(0, line.find(' ')));
    const int pid = PidIn(name);
    if (pid > 0 && !Alive(pid)) {
      Run(absl::StrCat(kIp, " netns del ", name)).IgnoreError();
    }
  }
  // Bridges, and veth ends whose namespace outlived its name.
  Run(absl::StrCat(kIp, " -o link show"), &listed).IgnoreError();
  for (absl::string_view line : absl::StrSplit(listed, '\n')) {
    // "12: dopt123x0br: <BROADCAST..." or "13: dopt123x0v0@if2: <..."
    const size_t colon = line.find(": ");
    if (colon == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(colon + 2);
    const std::string name(rest.substr(0, rest.find_first_of(":@")));
    const int pid = PidIn(name);
    if (pid > 0 && !Alive(pid)) {
      Run(absl::StrCat(kIp, " link del ", name)).IgnoreError();
    }
  }
  std::set<int> used;
  Run(absl::StrCat(kIp, " -o -4 addr show"), &listed).IgnoreError();
  for (absl::string_view line : absl::StrSplit(listed, '\n')) {
    const size_t at = line.find(" 10.77.");
    if (at == absl::string_view::npos) continue;
    int third = 0;
    absl::string_view rest = line.substr(at + 7);
    if (absl::SimpleAtoi(rest.substr(0, rest.find('.')), &third)) {
      used.insert(third);
    }
  }
  return used;
}

}  // namespace

bool VirtualHosts::Possible(std::string* why_not) {
  if (geteuid() != 0) {
    *why_not = "needs root (network namespaces, a bridge, tc)";
    return false;
  }
  if (access(kIp, X_OK) != 0 || access(kTc, X_OK) != 0) {
    *why_not = "needs /usr/sbin/ip and /usr/sbin/tc (iproute2)";
    return false;
  }
  return true;
}

VirtualHosts::VirtualHosts(int hosts)
    : hosts_(hosts),
      // The pid, then which of this process's instances: "dopt4242x3".
      prefix_(
          absl::StrCat("dopt", getpid() % 100000, "x", NextInstance() % 100)) {}

std::string VirtualHosts::Namespace(int host) const {
  return absl::StrCat(prefix_, "h", host);
}

std::string VirtualHosts::BridgeSide(int host) const {
  return absl::StrCat(prefix_, "v", host);  // At most 15 characters.
}

std::string VirtualHosts::Address(int host) const {
  return absl::StrCat(subnet_, ".", 11 + host);
}

std::vector<std::string> VirtualHosts::Launcher(int host) const {
  return {kIp, "netns", "exec", Namespace(host)};
}

absl::StatusOr<std::unique_ptr<VirtualHosts>> VirtualHosts::Create(int hosts) {
  std::unique_ptr<VirtualHosts> made(new VirtualHosts(hosts));
  const std::string bridge = made->prefix_ + "br";
  const std::string ip = kIp;
  // Tests that run at once pick their subnets one at a time.
  const int lock =
      open("/tmp/distopt_virtual_hosts.lock", O_CREAT | O_RDWR, 0600);
  if (lock < 0 || flock(lock, LOCK_EX) != 0) {
    return absl::FailedPreconditionError(
        "cannot lock /tmp/distopt_virtual_hosts.lock");
  }
  absl::Cleanup unlock = [lock] { close(lock); };
  const std::set<int> used = CleanUpAndListSubnets();
  int third = 0;
  while (used.count(third) > 0) ++third;
  if (third > 255) {
    return absl::FailedPreconditionError("no subnet 10.77.x.0/24 is free");
  }
  made->subnet_ = absl::StrCat("10.77.", third);
  absl::Status status =
      Run(absl::StrCat(ip, " link add ", bridge, " type bridge"));
  if (!status.ok()) return status;
  made->bridge_made_ = true;
  for (const std::string& command :
       {absl::StrCat(ip, " addr add ", made->subnet_, ".1/24 dev ", bridge),
        absl::StrCat(ip, " link set ", bridge, " up")}) {
    status = Run(command);
    if (!status.ok()) return status;
  }
  for (int h = 0; h < hosts; ++h) {
    const std::string ns = made->Namespace(h);
    const std::string outside = made->BridgeSide(h);
    status = Run(absl::StrCat(ip, " netns add ", ns));
    if (!status.ok()) return status;
    ++made->namespaces_made_;
    for (const std::string& command : {
             absl::StrCat(ip, " link add ", outside,
                          " type veth peer name eth0 netns ", ns),
             absl::StrCat(ip, " link set ", outside, " master ", bridge),
             absl::StrCat(ip, " link set ", outside, " up"),
             absl::StrCat(ip, " -n ", ns, " addr add ", made->Address(h),
                          "/24 dev eth0"),
             absl::StrCat(ip, " -n ", ns, " link set eth0 up"),
             absl::StrCat(ip, " -n ", ns, " link set lo up"),
         }) {
      status = Run(command);
      if (!status.ok()) return status;
    }
  }
  return made;
}

absl::Status VirtualHosts::SetLink(int host, bool up) {
  return Run(
      absl::StrCat(kIp, " link set ", BridgeSide(host), up ? " up" : " down"));
}

absl::Status VirtualHosts::LimitBandwidth(int host, int megabits) {
  const std::string device =
      absl::StrCat(kIp, " netns exec ", Namespace(host), " ", kTc);
  if (megabits == 0) {
    return Run(absl::StrCat(device, " qdisc del dev eth0 root"));
  }
  // A bucket of one 10 ms burst at the rate, a queue of 50 ms.
  const int burst_bytes = std::max(megabits * 1000 * 1000 / 8 / 100, 16384);
  return Run(absl::StrCat(device, " qdisc replace dev eth0 root tbf rate ",
                          megabits, "mbit burst ", burst_bytes,
                          " latency 50ms"));
}

VirtualHosts::~VirtualHosts() {
  // Removing a namespace removes its end of the veth pair, and the pair
  // with it.
  // The kernel frees a namespace (and the veth pair in it) some time after
  // its name is removed: the pair is deleted first, at once.
  for (int h = 0; h < namespaces_made_; ++h) {
    Run(absl::StrCat(kIp, " link del ", BridgeSide(h))).IgnoreError();
    Run(absl::StrCat(kIp, " netns del ", Namespace(h))).IgnoreError();
  }
  if (bridge_made_) {
    Run(absl::StrCat(kIp, " link del ", prefix_, "br")).IgnoreError();
  }
}

}  // namespace testing
}  // namespace distopt
