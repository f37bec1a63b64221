// WorkerOptions: everything the daemon is configured with, filled from the
// command line by main.cc and validated here, apart from the flags library
// so that tests can build options directly. The defaults here are the
// flags' defaults.
#ifndef DISTOPT_SERVER_DAEMON_WORKER_OPTIONS_H_
#define DISTOPT_SERVER_DAEMON_WORKER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/device.h"
#include "server/services/stream_limits.h"

namespace distopt {

struct WorkerOptions {
  // host:port to listen on; port 0 picks a free one.
  std::string listen = "127.0.0.1:50051";
  Device device = Device::Cpu();
  // Where to write the bound address once listening ("" for nowhere).
  std::string port_file;
  // host:port serving Prometheus's /metrics over HTTP; empty: none. Port 0
  // picks a free one (StatusService and the start-up line report it).
  std::string metrics_listen;

  // The data-parallel group this daemon is a rank of (world_size 1: none).
  int rank = 0;
  int world_size = 1;
  std::vector<std::string> peers;  // The other daemons' addresses.
  // Or: rank 0's address, or etcd://HOST:PORT/JOB (the group's store in
  // etcd; a rank's daemon can then be replaced).
  std::string rendezvous;
  // With etcd: how long a killed daemon's rank stays held.
  absl::Duration rank_hold_ttl = absl::Seconds(5);

  // Where parameters and optimizers are restored from at start-up and
  // saved to at a graceful shutdown ("" for nowhere). See
  // server/daemon/checkpointer.h.
  std::string checkpoint_dir;
  // Checkpoints kept before the newest, to fall back on when it is found
  // damaged at start-up.
  int checkpoint_keep = 1;
  // Also saved this often (zero: not by time), and after this many
  // optimizer steps (zero: not by steps).
  absl::Duration checkpoint_interval = absl::ZeroDuration();
  int64_t checkpoint_every_steps = 0;

  // Shared libraries that add optimizer kinds (server/optim/plugin_api.h).
  std::vector<std::string> optimizer_plugins;

  // Autograd contexts idle longer than this are collected (a trainer that
  // crashed never releases its contexts).
  absl::Duration context_ttl = absl::Minutes(30);

  // How long a rank waits for the others to join its group.
  absl::Duration group_timeout = absl::Minutes(5);
  // A file holding the group's secret (at least 16 bytes besides
  // whitespace), the same on every rank: only callers that present it may
  // use the group's key-value store. Required when world_size > 1.
  std::string group_secret_file;
  // For daemons started in-process (tests): the secret itself, instead of
  // the file.
  std::string group_secret;

  // Memory clients can make the daemon hold (common/memory_budget.h): the
  // largest tensor, and everything together; 0 means no limit.
  uint64_t max_tensor_bytes = 0;
  uint64_t max_total_bytes = 0;
  // Server threads in all: past it a call is refused (RESOURCE_EXHAUSTED).
  // 0: ThreadLimit's choice, enough for any group size.
  int max_threads = 0;
  // Calls that stay open as long as their client likes (streams, and calls
  // that wait for other ranks; the group's store Waits take none): in all
  // (--max_streams), per connection (--max_streams_per_connection), and how
  // long a reply write or request read may stall (--stream_stall_timeout).
  StreamLimitOptions streams;

  // TLS: PEM files of the server's certificate chain and private key. With
  // a client CA, clients must present a certificate it signed (mutual TLS).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // When set, every call must carry "authorization: Bearer <token>" with
  // the token this file holds (surrounding whitespace ignored). Needs TLS:
  // a token must not travel in clear text.
  std::string auth_token_file;

  // How long in-flight calls may take to finish after SIGTERM or SIGINT.
  absl::Duration shutdown_grace = absl::Seconds(30);
};

// INVALID_ARGUMENT naming the flag (--listen, --rank, ...) and what it
// expects when the options are inconsistent.
// The server threads the daemon runs with: --max_threads, or when that is
// 0, what the streams, the short calls and the group's store Waits need
// (see ValidateWorkerOptions), at least 256.
int ThreadLimit(const WorkerOptions& options);

absl::Status ValidateWorkerOptions(const WorkerOptions& options);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DAEMON_WORKER_OPTIONS_H_
