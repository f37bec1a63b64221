#include "server/daemon/metrics_http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace distopt {
namespace {

// Milliseconds left until `deadline`, for poll(); 0 once past.
int MillisecondsUntil(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
}

// Waits until `fd` is ready for `events`, up to `deadline`.
bool AwaitReady(int fd, short events, absl::Time deadline) {
  while (true) {
    pollfd ready{fd, events, 0};
    const int waited = poll(&ready, 1, MillisecondsUntil(deadline));
    if (waited > 0) return true;
    if (waited == 0) return false;
    if (errno != EINTR) return false;
  }
}

bool WriteAll(int fd, const std::string& bytes, absl::Time deadline) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + written, bytes.size() - written,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
        AwaitReady(fd, POLLOUT, deadline)) {
      continue;
    }
    return false;
  }
  return true;
}

std::string Reply(absl::string_view status, absl::string_view content_type,
                  const std::string& body, bool with_body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", with_body ? body : "");
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, const std::string& flag,
    std::vector<std::weak_ptr<prometheus::Collectable>> collectables) {
  const size_t colon = listen.rfind(':');
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  auto cannot = [&](absl::string_view why) {
    return absl::UnavailableError(absl::StrCat(
        flag, "=", listen,
        ": cannot listen there (address in use, or not an address of this "
        "machine): ",
        why));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int looked_up = getaddrinfo(host.empty() ? nullptr : host.c_str(),
                                    port.c_str(), &hints, &found);
  if (looked_up != 0) return cannot(gai_strerror(looked_up));
  int listener = -1;
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && listener < 0; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
      listener = fd;
    } else {
      error = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (listener < 0) return cannot(error);
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(listener, reinterpret_cast<sockaddr*>(&bound), &length);
  const int bound_port =
      bound.ss_family == AF_INET6
          ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
          : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer(
      listener, absl::StrCat(listen.substr(0, colon), ":", bound_port),
      std::move(collectables)));
  if (pipe2(server->wake_, O_CLOEXEC) != 0) {
    return cannot(std::strerror(errno));
  }
  MetricsHttpServer* self = server.get();
  server->thread_ = std::thread([self] { self->Serve(); });
  return server;
}

MetricsHttpServer::MetricsHttpServer(
    int listener, std::string address,
    std::vector<std::weak_ptr<prometheus::Collectable>> collectables)
    : listener_(listener),
      address_(std::move(address)),
      collectables_(std::move(collectables)) {}

MetricsHttpServer::~MetricsHttpServer() {
  stopping_ = true;
  if (wake_[1] >= 0) {
    const char byte = 0;
    [[maybe_unused]] ssize_t ignored = write(wake_[1], &byte, 1);
  }
  if (thread_.joinable()) thread_.join();
  close(listener_);
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

std::string MetricsHttpServer::Render() const {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& weak : collectables_) {
    const std::shared_ptr<prometheus::Collectable> collectable = weak.lock();
    if (collectable == nullptr) continue;
    std::vector<prometheus::MetricFamily> more = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  }
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, families);
  return text.str();
}

void MetricsHttpServer::Serve() {
  while (!stopping_) {
    pollfd ready[2] = {{listener_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(ready, 2, -1) < 0) continue;  // EINTR.
    if (stopping_ || (ready[1].revents & POLLIN)) return;
    const int connection = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    Answer(connection);
    close(connection);
  }
}

void MetricsHttpServer::Answer(int connection) const {
  const absl::Time request_deadline = absl::Now() + kRequestTimeout;
  std::string head;
  char buffer[4096];
  while (head.find("\r\n\r\n") == std::string::npos &&
         head.find("\n\n") == std::string::npos) {
    if (head.size() > kMaxRequestBytes) {
      WriteAll(connection,
               Reply("431 Request Header Fields Too Large", "text/plain",
                     "request head too large\n", true),
               absl::Now() + kReplyTimeout);
      return;
    }
    if (!AwaitReady(connection, POLLIN, request_deadline)) return;
    const ssize_t n = recv(connection, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0) return;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return;
    }
    head.append(buffer, static_cast<size_t>(n));
  }
  const std::string first_line = head.substr(0, head.find('\n'));
  const absl::string_view line = absl::StripAsciiWhitespace(first_line);
  const std::vector<absl::string_view> parts =
      absl::StrSplit(line, ' ', absl::SkipEmpty());
  const absl::Time reply_deadline = absl::Now() + kReplyTimeout;
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    WriteAll(
        connection,
        Reply("400 Bad Request", "text/plain", "expected GET /metrics\n", true),
        reply_deadline);
    return;
  }
  const bool head_only = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head_only) {
    WriteAll(connection,
             Reply("405 Method Not Allowed", "text/plain",
                   "expected GET /metrics\n", true),
             reply_deadline);
    return;
  }
  const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") {
    WriteAll(connection,
             Reply("404 Not Found", "text/plain", "metrics are at /metrics\n",
                   !head_only),
             reply_deadline);
    return;
  }
  WriteAll(connection,
           Reply("200 OK", "text/plain; version=0.0.4; charset=utf-8", Render(),
                 !head_only),
           reply_deadline);
}

}  // namespace distopt
