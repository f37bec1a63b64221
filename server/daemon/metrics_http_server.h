// Serves Prometheus's text format at GET /metrics over plain HTTP/1.1, from
// prometheus-cpp's collectables and serializer.
//
// Why not prometheus-cpp's own Exposer: it serves through civetweb, whose
// worker threads Debian builds with 100 KiB stacks; glibc puts a thread's
// static TLS on its stack, and the daemon's (OpenBLAS alone takes 60 KiB)
// left too little: the first scrape overflowed the stack inside mg_printf
// (found by the Prometheus test). This server runs one thread with the
// default stack.
//
// One thread serves every connection at once (poll), each bounded: its
// request head must arrive within kRequestTimeout and be at most
// kMaxRequestBytes, and the reply is written within kReplyTimeout; then
// the connection is closed (Prometheus reconnects per scrape). At most
// kMaxConnections are open: a new one closes the oldest still sending its
// request, so clients that connect and send nothing slowly (or never)
// cannot keep scrapers out; at most kAcceptsPerRound are accepted between
// two polls, so a flood of connects cannot push one out unserved.
// Anything but GET or HEAD is 405, any other path 404.
#ifndef DISTOPT_SERVER_DAEMON_METRICS_HTTP_SERVER_H_
#define DISTOPT_SERVER_DAEMON_METRICS_HTTP_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"

namespace distopt {

class MetricsHttpServer {
 public:
  static constexpr absl::Duration kRequestTimeout = absl::Seconds(5);
  static constexpr absl::Duration kReplyTimeout = absl::Seconds(10);
  static constexpr size_t kMaxRequestBytes = 16 * 1024;
  static constexpr size_t kMaxConnections = 64;
  static constexpr size_t kAcceptsPerRound = 16;
  // How long the listener rests after accept found no descriptor (or
  // memory) for a connection.
  static constexpr absl::Duration kListenerRest = absl::Milliseconds(100);

  // Listens on `listen` (host:port; port 0 picks one) and serves until
  // destroyed. UNAVAILABLE naming `flag` when it cannot listen.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, const std::string& flag,
      std::vector<std::weak_ptr<prometheus::Collectable>> collectables);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // host:port with the bound port.
  const std::string& address() const { return address_; }

  // The text /metrics serves now.
  std::string Render() const;

 private:
  MetricsHttpServer(
      int listener, std::string address,
      std::vector<std::weak_ptr<prometheus::Collectable>> collectables);
  struct Connection;
  void Serve();
  // Reads or writes what `events` allow; false once the connection is done
  // (replied, gone, or broken).
  bool Advance(Connection& connection, short events) const;
  // The whole reply to a request head.
  std::string ReplyTo(absl::string_view head) const;

  const int listener_;
  const std::string address_;
  const std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;
  // Written to wake the serving thread when stopping.
  int wake_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_DAEMON_METRICS_HTTP_SERVER_H_
