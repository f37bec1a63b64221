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
    // Non-blocking: Serve accepts until none is left, then polls.
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
               a->ai_protocol);
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

std::string MetricsHttpServer::ReplyTo(absl::string_view head) const {
  const absl::string_view line =
      absl::StripAsciiWhitespace(head.substr(0, head.find('\n')));
  const std::vector<absl::string_view> parts =
      absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Reply("400 Bad Request", "text/plain", "expected GET /metrics\n",
                 true);
  }
  const bool head_only = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head_only) {
    return Reply("405 Method Not Allowed", "text/plain",
                 "expected GET /metrics\n", true);
  }
  const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") {
    return Reply("404 Not Found", "text/plain", "metrics are at /metrics\n",
                 !head_only);
  }
  return Reply("200 OK", "text/plain; version=0.0.4; charset=utf-8", Render(),
               !head_only);
}

// One client's connection: its request head as it arrives, then the reply
// as it leaves.
struct MetricsHttpServer::Connection {
  int fd = -1;
  absl::Time accepted;
  // Reading the head until then; writing the reply until then.
  absl::Time deadline;
  std::string head;
  bool replying = false;
  std::string reply;
  size_t sent = 0;
};

void MetricsHttpServer::Serve() {
  std::vector<Connection> connections;
  // After accept fails for want of descriptors or memory, the listener
  // rests a while (its queue keeps the clients) instead of spinning.
  absl::Time listener_rests_until = absl::InfinitePast();
  auto close_at = [&](size_t i) {
    close(connections[i].fd);
    if (i + 1 < connections.size())
      connections[i] = std::move(connections.back());
    connections.pop_back();
  };
  while (!stopping_) {
    const absl::Time now = absl::Now();
    for (size_t i = connections.size(); i-- > 0;) {
      if (connections[i].deadline <= now) close_at(i);
    }
    absl::Time wake_at = absl::InfiniteFuture();
    std::vector<pollfd> ready = {{wake_[0], POLLIN, 0}};
    const bool listening = now >= listener_rests_until;
    ready.push_back({listening ? listener_ : -1, POLLIN, 0});
    if (!listening) wake_at = listener_rests_until;
    for (const Connection& c : connections) {
      ready.push_back(
          {c.fd, static_cast<short>(c.replying ? POLLOUT : POLLIN), 0});
      wake_at = std::min(wake_at, c.deadline);
    }
    const int timeout =
        wake_at == absl::InfiniteFuture() ? -1 : MillisecondsUntil(wake_at);
    if (poll(ready.data(), ready.size(), timeout) < 0) continue;  // EINTR.
    if (stopping_ || (ready[0].revents & POLLIN)) break;
    // Connections first (their indices match `ready` until one closes),
    // from the last, so that closing one moves only those already seen.
    for (size_t i = connections.size(); i-- > 0;) {
      const short events = ready[i + 2].revents;
      if (events == 0) continue;
      if (!Advance(connections[i], events)) close_at(i);
    }
    if ((ready[1].revents & POLLIN) == 0) continue;
    // A few per round: every connection accepted is polled at least once
    // before as many more could push it out (a flood of connects would
    // otherwise keep this loop accepting and evicting).
    for (size_t accepted = 0; accepted < kAcceptsPerRound; ++accepted) {
      const int fd =
          accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
          listener_rests_until = absl::Now() + kListenerRest;
        }
        break;  // EAGAIN: none left; anything else: the client's trouble.
      }
      if (connections.size() == kMaxConnections) {
        // The oldest still sending its request head gives way: clients
        // that open connections and send nothing cannot lock scrapers out,
        // and a reply being written is finished (with every one replying,
        // the new connection is closed: it can come again).
        size_t oldest = connections.size();
        for (size_t i = 0; i < connections.size(); ++i) {
          if (!connections[i].replying &&
              (oldest == connections.size() ||
               connections[i].accepted < connections[oldest].accepted)) {
            oldest = i;
          }
        }
        if (oldest == connections.size()) {
          close(fd);
          continue;
        }
        close_at(oldest);
      }
      Connection c;
      c.fd = fd;
      c.accepted = absl::Now();
      c.deadline = c.accepted + kRequestTimeout;
      connections.push_back(std::move(c));
    }
  }
  for (const Connection& c : connections) close(c.fd);
}

bool MetricsHttpServer::Advance(Connection& c, short events) const {
  if (c.replying) {
    while (c.sent < c.reply.size()) {
      const ssize_t n = send(c.fd, c.reply.data() + c.sent,
                             c.reply.size() - c.sent, MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += static_cast<size_t>(n);
        continue;
      }
      return n < 0 && (errno == EINTR || errno == EAGAIN);
    }
    return false;  // All sent: the connection closes.
  }
  if ((events & (POLLIN | POLLHUP | POLLERR)) == 0) return true;
  char buffer[4096];
  const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
  if (n == 0) return false;
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  // Where the end of the head may begin: only the bytes new since the last
  // look, and the three before them.
  const size_t from = c.head.size() < 3 ? 0 : c.head.size() - 3;
  c.head.append(buffer, static_cast<size_t>(n));
  const bool whole = c.head.find("\r\n\r\n", from) != std::string::npos ||
                     c.head.find("\n\n", from) != std::string::npos;
  if (!whole && c.head.size() <= kMaxRequestBytes) return true;
  c.reply = whole ? ReplyTo(c.head)
                  : Reply("431 Request Header Fields Too Large", "text/plain",
                          "request head too large\n", true);
  c.head.clear();
  c.replying = true;
  c.deadline = absl::Now() + kReplyTimeout;
  return Advance(c, POLLOUT);
}

}  // namespace distopt
