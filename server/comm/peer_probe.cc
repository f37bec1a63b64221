#include "server/comm/peer_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace distopt {
namespace {

bool ConnectWithin(const addrinfo& target, int timeout_ms) {
  const int fd = socket(target.ai_family, target.ai_socktype | SOCK_NONBLOCK,
                        target.ai_protocol);
  if (fd < 0) return false;
  bool connected = connect(fd, target.ai_addr, target.ai_addrlen) == 0;
  if (!connected && errno == EINPROGRESS) {
    pollfd waiting = {fd, POLLOUT, 0};
    if (poll(&waiting, 1, timeout_ms) == 1) {
      int error = 0;
      socklen_t length = sizeof(error);
      connected = getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 &&
                  error == 0;
    }
  }
  close(fd);
  return connected;
}

}  // namespace

bool AcceptsConnections(const std::string& address, absl::Duration timeout) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = address.substr(colon + 1);
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) {
    return false;
  }
  const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  bool connected = false;
  for (addrinfo* target = found; target != nullptr && !connected;
       target = target->ai_next) {
    connected = ConnectWithin(*target, timeout_ms);
  }
  freeaddrinfo(found);
  return connected;
}

}  // namespace distopt
