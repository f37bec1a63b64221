#include "common/testing/local_etcd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/http_get.h"

namespace distopt {
namespace testing {
namespace {

constexpr char kEtcd[] = "/usr/bin/etcd";

// Two free loopback ports, held together while both are picked.
std::pair<int, int> FreePorts() {
  int fds[2];
  int ports[2];
  for (int i = 0; i < 2; ++i) {
    fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fds[i], reinterpret_cast<sockaddr*>(&address), sizeof(address));
    socklen_t length = sizeof(address);
    getsockname(fds[i], reinterpret_cast<sockaddr*>(&address), &length);
    ports[i] = ntohs(address.sin_port);
  }
  close(fds[0]);
  close(fds[1]);
  return {ports[0], ports[1]};
}

bool Accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  const bool ok =
      connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return ok;
}

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
  const auto [client_port, peer_port] = FreePorts();
  etcd->endpoint_ = absl::StrCat("127.0.0.1:", client_port);
  const std::string client_url = "http://" + etcd->endpoint_;
  const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port);
  const std::vector<std::string> args = {
      kEtcd,
      "--name=distopt-test",
      "--data-dir=" + folder + "/data",
      "--listen-client-urls=" + client_url,
      "--advertise-client-urls=" + client_url,
      "--listen-peer-urls=" + peer_url,
      "--initial-advertise-peer-urls=" + peer_url,
      "--initial-cluster=distopt-test=" + peer_url,
      "--log-level=error",
      "--logger=zap",
  };
  etcd->pid_ = fork();
  if (etcd->pid_ == 0) {
    std::vector<char*> argv;
    for (const std::string& arg : args) {
      argv.push_back(const_cast<char*>(arg.c_str()));
    }
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  // Listening comes before serving: /health says true once this member
  // is the cluster's leader.
  auto healthy = [&] {
    if (!Accepts(client_port)) return false;
    absl::StatusOr<HttpReply> reply = HttpGet(etcd->endpoint_, "/health");
    return reply.ok() &&
           reply->body.find("\"health\":\"true\"") != std::string::npos;
  };
  while (!healthy()) {
    int status = 0;
    if (waitpid(etcd->pid_, &status, WNOHANG) == etcd->pid_) {
      etcd->pid_ = -1;
      return absl::UnavailableError(
          absl::StrCat("etcd exited at start-up (status ", status, ")"));
    }
    if (absl::Now() > deadline) {
      return absl::UnavailableError("etcd did not become healthy within 30 s");
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return etcd;
}

LocalEtcd::~LocalEtcd() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int status = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  if (!folder_.empty()) {
    std::system(("rm -rf '" + folder_ + "'").c_str());
  }
}

}  // namespace testing
}  // namespace distopt
