#include "common/testing/local_etcd.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/child_process.h"
#include "common/testing/http_get.h"

namespace distopt {
namespace testing {
namespace {

constexpr char kEtcd[] = "/usr/bin/etcd";

}  // namespace

absl::StatusOr<std::unique_ptr<LocalEtcd>> LocalEtcd::Start() {
  if (access(kEtcd, X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(kEtcd,
                     " is missing; expected Debian's etcd-server "
                     "(tools/install_deps.sh installs it)"));
  }
  auto etcd = std::unique_ptr<LocalEtcd>(new LocalEtcd);
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string folder =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/local_etcd.XXXXXX");
  if (mkdtemp(folder.data()) == nullptr) {
    return absl::InternalError("cannot make a folder for etcd");
  }
  etcd->folder_ = folder;
  const std::vector<int> ports = FreeLoopbackPorts(2);
  etcd->endpoint_ = absl::StrCat("127.0.0.1:", ports[0]);
  etcd->peer_port_ = ports[1];
  absl::Status running = etcd->Run();
  if (!running.ok()) return running;
  return etcd;
}

absl::Status LocalEtcd::Run() {
  const std::string client_url = "http://" + endpoint_;
  const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port_);
  const std::vector<std::string> args = {
      kEtcd,
      "--name=distopt-test",
      "--data-dir=" + folder_ + "/data",
      "--listen-client-urls=" + client_url,
      "--advertise-client-urls=" + client_url,
      "--listen-peer-urls=" + peer_url,
      "--initial-advertise-peer-urls=" + peer_url,
      "--initial-cluster=distopt-test=" + peer_url,
      "--log-level=error",
      "--logger=zap",
  };
  pid_ = StartProcess(args);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  // Listening comes before serving: /health says true once this member
  // is the cluster's leader.
  auto healthy = [&] {
    absl::StatusOr<HttpReply> reply = HttpGet(endpoint_, "/health");
    return reply.ok() &&
           reply->body.find("\"health\":\"true\"") != std::string::npos;
  };
  while (!healthy()) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::UnavailableError(
          absl::StrCat("etcd exited at start-up (status ", status, ")"));
    }
    if (absl::Now() > deadline) {
      return absl::UnavailableError("etcd did not become healthy within 30 s");
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

absl::Status LocalEtcd::RestartEmpty() {
  StopProcess(pid_);
  pid_ = -1;
  std::system(("rm -rf '" + folder_ + "/data'").c_str());
  return Run();
}

LocalEtcd::~LocalEtcd() {
  StopProcess(pid_);
  if (!folder_.empty()) {
    std::system(("rm -rf '" + folder_ + "'").c_str());
  }
}

}  // namespace testing
}  // namespace distopt
