#include "server/daemon/worker_options.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/comm/etcd_rendezvous_store.h"

namespace distopt {
namespace {

// Threads above --max_streams for short calls, which take no slot. The
// group's store Waits take none either: rank 0 serves about one per other
// rank at a time (a rank connects its collectives one after the other),
// so the rule below adds one thread per other rank.
constexpr int kShortCallThreads = 16;

int64_t LeastThreads(const WorkerOptions& options) {
  return int64_t{options.streams.total} + kShortCallThreads +
         std::max(0, options.world_size - 1);
}

// host:port, [v6]:port or unix:path; the port 0 to 65535.
absl::Status ValidateAddress(const std::string& address,
                             absl::string_view flag) {
  if (absl::StartsWith(address, "unix:")) return absl::OkStatus();
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", address,
                     ": expected HOST:PORT with a port from 0 to 65535"));
  }
  return absl::OkStatus();
}

}  // namespace

int ThreadLimit(const WorkerOptions& options) {
  if (options.max_threads != 0) return options.max_threads;
  return static_cast<int>(std::max<int64_t>(256, LeastThreads(options)));
}

absl::Status ValidateWorkerOptions(const WorkerOptions& options) {
  absl::Status status = ValidateAddress(options.listen, "--listen");
  if (status.ok() && !options.metrics_listen.empty()) {
    status = ValidateAddress(options.metrics_listen, "--metrics_listen");
  }
  if (!status.ok()) return status;
  if (options.checkpoint_keep < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_keep=", options.checkpoint_keep, ": expected 0 or more"));
  }
  if (options.checkpoint_interval < absl::ZeroDuration() ||
      options.checkpoint_every_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_interval=",
        absl::FormatDuration(options.checkpoint_interval),
        " --checkpoint_every_steps=", options.checkpoint_every_steps,
        ": expected 0 (off) or more"));
  }
  // Shorter, a save would begin as soon as the last ended (a typo such as
  // 1ns, or a unit left out); the tests' shortest is 300ms.
  constexpr absl::Duration kShortestInterval = absl::Milliseconds(100);
  if (options.checkpoint_interval > absl::ZeroDuration() &&
      options.checkpoint_interval < kShortestInterval) {
    return absl::InvalidArgumentError(
        absl::StrCat("--checkpoint_interval=",
                     absl::FormatDuration(options.checkpoint_interval),
                     ": expected 0 (off) or at least ",
                     absl::FormatDuration(kShortestInterval)));
  }
  if (options.checkpoint_dir.empty() &&
      (options.checkpoint_interval > absl::ZeroDuration() ||
       options.checkpoint_every_steps > 0)) {
    return absl::InvalidArgumentError(
        "--checkpoint_interval and --checkpoint_every_steps need "
        "--checkpoint_dir: expected the folder to save into");
  }
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--world_size=", options.world_size, ": expected at least 1"));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rank=", options.rank, ": expected 0 to ", options.world_size - 1,
        " for --world_size=", options.world_size));
  }
  if (!options.peers.empty() && !options.rendezvous.empty()) {
    return absl::InvalidArgumentError(
        "--peers and --rendezvous: expected one of them, not both");
  }
  if (!options.peers.empty() &&
      options.peers.size() != static_cast<size_t>(options.world_size - 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--peers=", absl::StrJoin(options.peers, ","), ": ",
        options.peers.size(),
        " addresses; expected world_size - 1 = ", options.world_size - 1));
  }
  for (const std::string& peer : options.peers) {
    status = ValidateAddress(peer, "--peers");
    if (!status.ok()) return status;
  }
  if (IsEtcdUrl(options.rendezvous)) {
    absl::StatusOr<EtcdRendezvous> etcd =
        ParseEtcdUrl(options.rendezvous, "--rendezvous");
    if (!etcd.ok()) return etcd.status();
  } else if (!options.rendezvous.empty()) {
    status = ValidateAddress(options.rendezvous, "--rendezvous");
    if (!status.ok()) return status;
  }
  if (options.rank_hold_ttl < absl::Seconds(2) ||
      options.rank_hold_ttl > absl::Minutes(10)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rank_hold_ttl=", absl::FormatDuration(options.rank_hold_ttl),
        ": expected 2s to 10m"));
  }
  if (options.world_size > 1 && options.peers.empty() &&
      options.rendezvous.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--world_size=", options.world_size,
                     ": expected --peers or --rendezvous (rank 0's address, or "
                     "etcd://HOST:PORT/JOB) to find the other ranks"));
  }
  // The ranks reach rank 0's store over plaintext gRPC: a TLS daemon would
  // refuse them, and the group would wait out --group_timeout. Said now.
  if (options.world_size > 1 && !options.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--world_size=", options.world_size,
        " with --tls_cert_file: the ranks of a data-parallel group reach each "
        "other over plaintext only (their store is guarded by "
        "--group_secret_file); expected a plaintext listen address for ranks"));
  }
  if (options.world_size > 1 && options.group_secret_file.empty() &&
      options.group_secret.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--world_size=", options.world_size,
        ": expected --group_secret_file, a file with the group's secret (the "
        "same on every rank; only its ranks may use the group's store)"));
  }
  const StreamLimitOptions& streams = options.streams;
  if (streams.total < 1 || streams.per_connection < 1 ||
      streams.per_connection > streams.total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_streams=", streams.total, " --max_streams_per_connection=",
        streams.per_connection, ": expected 1 <= per connection <= total"));
  }
  // Calls with a slot may hold --max_streams threads; the rest must still
  // find one.
  const int64_t least_threads = LeastThreads(options);
  if (options.max_threads != 0 && options.max_threads < least_threads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_threads=", options.max_threads, ": expected at least ",
        least_threads, " (--max_streams, plus ", kShortCallThreads,
        " for short calls and one per other rank for the group's store "
        "waits)"));
  }
  if (streams.stall_timeout < absl::Milliseconds(100)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--stream_stall_timeout=", absl::FormatDuration(streams.stall_timeout),
        ": expected at least 100ms"));
  }
  if (options.max_total_bytes != 0 &&
      options.max_tensor_bytes > options.max_total_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_tensor_bytes=", options.max_tensor_bytes,
        ": expected at most --max_total_bytes=", options.max_total_bytes));
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file: expected both or neither");
  }
  if (options.tls_cert_file.empty() && !options.tls_client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_client_ca_file: expected --tls_cert_file and --tls_key_file "
        "too (mutual TLS needs a server certificate)");
  }
  if (options.tls_cert_file.empty() && !options.auth_token_file.empty()) {
    return absl::InvalidArgumentError(
        "--auth_token_file: expected --tls_cert_file and --tls_key_file too: "
        "a bearer token must not travel in clear text");
  }
  if (options.context_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--context_ttl: expected a duration > 0");
  }
  if (options.shutdown_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--shutdown_grace: expected a duration >= 0");
  }
  return absl::OkStatus();
}

}  // namespace distopt
