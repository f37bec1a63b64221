#include "common/testing/child_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/time/clock.h"

namespace distopt {
namespace testing {

std::vector<int> FreeLoopbackPorts(int count) {
  std::vector<int> fds;
  std::vector<int> ports;
  for (int i = 0; i < count; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    socklen_t length = sizeof(address);
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    fds.push_back(fd);
    ports.push_back(ntohs(address.sin_port));
  }
  for (int fd : fds) close(fd);
  return ports;
}

pid_t StartProcess(const std::vector<std::string>& args) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (const std::string& arg : args) {
      argv.push_back(const_cast<char*>(arg.c_str()));
    }
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

void StopProcess(pid_t pid, absl::Duration grace) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  int status = 0;
  const absl::Time deadline = absl::Now() + grace;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace testing
}  // namespace distopt
