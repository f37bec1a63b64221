// distopt_worker: one daemon per device, serving distopt.v1 over gRPC.
//
// Exit codes: 0 after a graceful shutdown (SIGTERM or SIGINT), 2 for bad
// flags, 3 when the device is unavailable, 4 when the address cannot be
// bound, 5 when --checkpoint_dir holds a checkpoint that cannot be restored,
// 6 when saving the checkpoint at shutdown failed, 7 when calls still ran
// 5 s after --shutdown_grace (the daemon exits without them, and without
// saving a checkpoint).
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/device.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/version.h"
#include "grpc/grpc.h"
#include "server/daemon/worker_options.h"
#include "server/daemon/worker_server.h"

namespace {

// The flags' defaults are WorkerOptions' own.
const distopt::WorkerOptions& Defaults() {
  static const distopt::WorkerOptions* const defaults =
      new distopt::WorkerOptions();
  return *defaults;
}

}  // namespace

ABSL_FLAG(std::string, listen, Defaults().listen,
          "host:port to serve on; port 0 picks a free port, reported on "
          "stdout and in --port_file");
ABSL_FLAG(std::string, device, Defaults().device.ToString(),
          "where parameters live: cpu or cuda:N");
ABSL_FLAG(std::string, port_file, "",
          "if set, the bound host:port is written to this file once serving");
ABSL_FLAG(std::string, metrics_listen, "",
          "host:port to serve Prometheus metrics on, at /metrics (empty: "
          "none; e.g. 127.0.0.1:9400, or 0.0.0.0:9400 for other machines' "
          "scrapers; port 0 picks a free port, reported on stdout)");
ABSL_FLAG(bool, record_metrics, true,
          "record metrics (StatusService and /metrics); false only to "
          "measure what recording costs");
ABSL_FLAG(std::string, log_format, "text",
          "text (logfmt: time=... level=... msg=\"...\" key=value) or json "
          "(one object a line)");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "restore parameters and optimizers from this folder at start-up "
          "and save them there at a graceful shutdown (and as "
          "--checkpoint_interval, --checkpoint_every_steps and "
          "CheckpointService.Save say)");
ABSL_FLAG(absl::Duration, checkpoint_interval, absl::ZeroDuration(),
          "also save a checkpoint this often, e.g. 10m (0: not by time)");
ABSL_FLAG(int64_t, checkpoint_every_steps, 0,
          "also save a checkpoint after this many optimizer steps (0: not "
          "by steps)");
ABSL_FLAG(int, checkpoint_keep, Defaults().checkpoint_keep,
          "checkpoints kept before the newest in --checkpoint_dir "
          "(parameters.<n>, the higher the newer), to fall back on when the "
          "newest is damaged");
ABSL_FLAG(std::vector<std::string>, optimizer_plugin, {},
          "shared library adding optimizer kinds (comma-separated, or the "
          "flag repeated); see server/optim/plugin_api.h");
ABSL_FLAG(absl::Duration, context_ttl, Defaults().context_ttl,
          "autograd contexts idle longer than this are collected");
ABSL_FLAG(absl::Duration, group_timeout, Defaults().group_timeout,
          "how long to wait for the other ranks of the group to join");
ABSL_FLAG(std::string, group_secret_file, "",
          "file with the data-parallel group's secret (at least 16 bytes, the "
          "same on every rank); required with --world_size > 1");
ABSL_FLAG(int, rank, Defaults().rank,
          "this daemon's rank in its data-parallel group");
ABSL_FLAG(int, world_size, Defaults().world_size,
          "number of ranks in the data-parallel group");
ABSL_FLAG(std::vector<std::string>, peers, {},
          "comma-separated addresses of the other ranks' daemons");
ABSL_FLAG(std::string, rendezvous, "",
          "rank 0's address, instead of --peers; or etcd://HOST:PORT/JOB: the "
          "group's store in etcd, where every rank holds its rank and a rank "
          "whose daemon died can be taken by a new daemon");
ABSL_FLAG(absl::Duration, rank_hold_ttl, Defaults().rank_hold_ttl,
          "with an etcd rendezvous: how long the rank of a daemon that was "
          "killed stays held (a graceful stop frees it at once); 2s to 10m");
ABSL_FLAG(uint64_t, max_tensor_bytes, Defaults().max_tensor_bytes,
          "largest tensor the daemon accepts, in bytes (0: no limit)");
ABSL_FLAG(uint64_t, max_total_bytes, Defaults().max_total_bytes,
          "most bytes the daemon holds for clients at once: parameters, "
          "gradients and autograd contexts, optimizer state, the group's "
          "store, requests arriving in chunks (0: no limit)");
ABSL_FLAG(int, max_threads, Defaults().max_threads,
          "server threads in all; past it a call is refused "
          "(RESOURCE_EXHAUSTED); at least --max_streams + 16 + world_size - 1 "
          "(0: that, and at least 256)");
ABSL_FLAG(int, max_streams, Defaults().streams.total,
          "calls that stay open as long as their client likes (streams, calls "
          "waiting for other ranks), in all");
ABSL_FLAG(int, max_streams_per_connection, Defaults().streams.per_connection,
          "such calls one connection keeps open at once");
ABSL_FLAG(absl::Duration, stream_stall_timeout,
          Defaults().streams.stall_timeout,
          "a call whose client reads none of its reply, or sends none of the "
          "rest of its request, for this long is ended");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain of this daemon; turns on TLS");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA certificates; clients must present a certificate one of "
          "them signed (mutual TLS)");
ABSL_FLAG(std::string, auth_token_file, "",
          "file holding a token every call must carry as 'authorization: "
          "Bearer <token>' (needs TLS)");
ABSL_FLAG(absl::Duration, shutdown_grace, Defaults().shutdown_grace,
          "how long in-flight calls may run on after SIGTERM or SIGINT; "
          "calls still running 5s later are abandoned and the daemon exits "
          "with code 7, saving no checkpoint");

namespace {

constexpr int kExitBadFlags = 2;
constexpr int kExitDeviceUnavailable = 3;
constexpr int kExitCannotListen = 4;
constexpr int kExitCheckpointUnreadable = 5;
constexpr int kExitCheckpointNotSaved = 6;
constexpr int kExitCallsOutlivedGrace = 7;
// How long after the grace the calls cancelled at its end may take to
// return before the daemon exits without them.
constexpr absl::Duration kShutdownMargin = absl::Seconds(5);

// Abseil's parser exits 1 on a flag it does not know or a value it cannot
// parse (--checkpoint_keep=abc); this daemon's code for bad flags is 2.
// While it parses, an exit is made 2, unless a usage flag (--help...,
// --version) asked for the exit.
std::atomic<bool> parsing_flags{false};

void ExitAsBadFlagsWhileParsing() {
  if (parsing_flags.load()) _exit(kExitBadFlags);
}

bool AsksForUsage(int argc, char** argv) {
  static constexpr absl::string_view kUsageFlags[] = {
      "help",   "helpfull",  "helpshort", "helppackage",
      "helpon", "helpmatch", "version",   "only_check_args"};
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) {
      continue;  // A value, not a flag.
    }
    const absl::string_view name = arg.substr(0, arg.find('='));
    for (absl::string_view usage : kUsageFlags) {
      if (name == usage) return true;
    }
  }
  return false;
}

int Fail(int code, const absl::Status& status) {
  distopt::log::Error(status.message(), {{"exit_code", code}});
  return code;
}

// Every value of a flag given several times (absl keeps only the last),
// commas splitting values too: "--f=a --f b,c" gives a, b, c.
std::vector<std::string> RepeatedFlagValues(int argc, char** argv,
                                            absl::string_view name) {
  std::vector<std::string> values;
  const std::string with_value = absl::StrCat("--", name, "=");
  const std::string alone = absl::StrCat("--", name);
  for (int i = 1; i < argc; ++i) {
    absl::string_view argument = argv[i];
    if (argument == "--") break;
    absl::string_view value;
    if (absl::ConsumePrefix(&argument, with_value)) {
      value = argument;
    } else if (argument == alone && i + 1 < argc) {
      value = argv[++i];
    } else {
      continue;
    }
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      if (!part.empty()) values.emplace_back(part);
    }
  }
  return values;
}

bool WritePortFile(const std::string& path, const std::string& address) {
  // Write then rename, so a reader never sees a partial address.
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << address << "\n";
    if (!out.good()) return false;
  }
  return std::rename(temporary.c_str(), path.c_str()) == 0;
}

// Tensors, gRPC messages and collective buckets are megabytes each, and
// many are short-lived (a message's bytes, a released context's
// gradients). glibc's default threshold for serving an allocation with its
// own mapping rises to 32 MiB after the first large free, and below it
// freed blocks stay in per-thread arenas, resident and often unusable by
// the next thread. A fixed 1 MiB threshold returns every large block to
// the system when it is freed: zero_step_bench measured the daemons' peaks
// 20 to 70 MiB lower with it. MALLOC_MMAP_THRESHOLD_ in the
// environment still decides where set.
//
// glibc also gives threads their own arenas, up to 8 per core, and each
// keeps the high-water mark of what its threads once held: the daemon's
// server threads come and go, and tests/soak_test saw its RSS creep 1.8 MB
// over 100k steps (6% of an idle daemon's 30 MB), still rising at the end.
// Two arenas held it to 1.1 MB, flat after 30k steps, and the soak ran
// faster (41 s against 52 s; small blocks come from the per-thread caches
// without locking either way). MALLOC_ARENA_MAX still decides where set.
void ReturnLargeBlocksWhenFreed() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) {
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
  }
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 2);
}

// Written by the handler, read by the main thread: the signal's number.
int shutdown_pipe[2] = {-1, -1};

void OnShutdownSignal(int signal_number) {
  const int saved_errno = errno;
  const char byte = static_cast<char>(signal_number);
  [[maybe_unused]] ssize_t written = write(shutdown_pipe[1], &byte, 1);
  errno = saved_errno;
}

bool InstallShutdownHandler() {
  if (pipe2(shutdown_pipe, O_CLOEXEC) != 0) return false;
  struct sigaction action = {};
  action.sa_handler = OnShutdownSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  return sigaction(SIGTERM, &action, nullptr) == 0 &&
         sigaction(SIGINT, &action, nullptr) == 0;
}

// Waits for the first SIGTERM or SIGINT; returns its number.
int AwaitShutdownSignal() {
  char byte = 0;
  while (read(shutdown_pipe[0], &byte, 1) != 1) {
    // EINTR: the handler ran on this thread.
  }
  return byte;
}

}  // namespace

int main(int argc, char** argv) {
  // SIGTERM and SIGINT are caught, by whichever thread takes them, and
  // handed to the main thread through a pipe. Blocking them alone was not
  // enough: threads started before main (OpenBLAS starts its workers when
  // it is loaded) leave them unblocked, and the kernel gave a SIGTERM sent
  // while the main thread was not yet waiting to such a thread, whose
  // default action killed the daemon (seen right after start-up in
  // tests/daemon_logs_test).
  if (!InstallShutdownHandler()) {
    std::perror("distopt_worker: cannot install the SIGTERM handler");
    return 1;
  }
  ReturnLargeBlocksWhenFreed();
  // Blocked until serving, so that the threads started meanwhile (gRPC's,
  // Abseil's) inherit the mask and never run the handler: their calls are
  // never interrupted by it.
  sigset_t shutdown_signals;
  sigemptyset(&shutdown_signals);
  sigaddset(&shutdown_signals, SIGTERM);
  sigaddset(&shutdown_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &shutdown_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // --help lists this file's flags (Abseil looks for a file named after
  // the program), and --version says the release.
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  usage.version_string = [] {
    return absl::StrCat("distopt_worker ", distopt::kVersion, "\n");
  };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "distopt_worker --listen=HOST:PORT [--device=cpu|cuda:N] ...\n"
      "Serves parameters, autograd and optimizers over gRPC (distopt.v1).");
  if (!AsksForUsage(argc, argv)) {
    parsing_flags = true;
    std::atexit(ExitAsBadFlagsWhileParsing);
  }
  // Exits on unknown or malformed flags.
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  parsing_flags = false;
  // The daemon takes flags only: "listen=..." without its dashes would
  // otherwise be dropped silently and the default used.
  if (positional.size() > 1) {
    return Fail(kExitBadFlags,
                absl::InvalidArgumentError(absl::StrCat(
                    "argument ", positional[1],
                    ": not a flag; expected flags only (--name=value)")));
  }
  absl::StatusOr<distopt::log::Format> log_format =
      distopt::log::ParseFormat(absl::GetFlag(FLAGS_log_format));
  if (!log_format.ok()) return Fail(kExitBadFlags, log_format.status());
  distopt::log::SetFormat(*log_format);
  distopt::metrics::SetRecording(absl::GetFlag(FLAGS_record_metrics));
  // Keeps gRPC initialised until the process exits. Otherwise destroying the
  // server runs the last grpc_shutdown(), which joins gRPC's executor threads,
  // and one of them may sit in a 10 s poll: the daemon would hang that long
  // after a clean shutdown.
  grpc_init();

  distopt::WorkerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  absl::StatusOr<distopt::Device> device =
      distopt::ParseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) {
    return Fail(kExitBadFlags, absl::InvalidArgumentError(absl::StrCat(
                                   "--", device.status().message())));
  }
  options.device = *device;
  options.port_file = absl::GetFlag(FLAGS_port_file);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.checkpoint_keep = absl::GetFlag(FLAGS_checkpoint_keep);
  options.checkpoint_interval = absl::GetFlag(FLAGS_checkpoint_interval);
  options.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  options.optimizer_plugins =
      RepeatedFlagValues(argc, argv, "optimizer_plugin");
  options.context_ttl = absl::GetFlag(FLAGS_context_ttl);
  options.group_timeout = absl::GetFlag(FLAGS_group_timeout);
  options.group_secret_file = absl::GetFlag(FLAGS_group_secret_file);
  options.rank = absl::GetFlag(FLAGS_rank);
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.peers = absl::GetFlag(FLAGS_peers);
  options.rendezvous = absl::GetFlag(FLAGS_rendezvous);
  options.rank_hold_ttl = absl::GetFlag(FLAGS_rank_hold_ttl);
  options.max_tensor_bytes = absl::GetFlag(FLAGS_max_tensor_bytes);
  options.max_total_bytes = absl::GetFlag(FLAGS_max_total_bytes);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  options.max_threads = absl::GetFlag(FLAGS_max_threads);
  options.streams.total = absl::GetFlag(FLAGS_max_streams);
  options.streams.per_connection =
      absl::GetFlag(FLAGS_max_streams_per_connection);
  options.streams.stall_timeout = absl::GetFlag(FLAGS_stream_stall_timeout);

  absl::StatusOr<std::unique_ptr<distopt::WorkerServer>> worker =
      distopt::WorkerServer::Start(options);
  if (!worker.ok()) {
    if (worker.status().GetPayload(distopt::kCheckpointNotRestored)) {
      return Fail(kExitCheckpointUnreadable, worker.status());
    }
    switch (worker.status().code()) {
      case absl::StatusCode::kInvalidArgument:
        return Fail(kExitBadFlags, worker.status());
      case absl::StatusCode::kFailedPrecondition:
        return Fail(kExitDeviceUnavailable, worker.status());
      case absl::StatusCode::kDataLoss:
      case absl::StatusCode::kResourceExhausted:
      case absl::StatusCode::kAlreadyExists:
      case absl::StatusCode::kNotFound:  // A restored optimizer's kind.
      case absl::StatusCode::kInternal:  // A checkpoint unreadable now.
        return Fail(kExitCheckpointUnreadable, worker.status());
      default:
        return Fail(kExitCannotListen, worker.status());
    }
  }
  if (!options.port_file.empty() &&
      !WritePortFile(options.port_file, (*worker)->address())) {
    return Fail(kExitBadFlags,
                absl::InvalidArgumentError(absl::StrCat(
                    "--port_file=", options.port_file, ": cannot write it")));
  }
  if (!options.checkpoint_dir.empty()) {
    distopt::log::Info(
        "restored", {{"parameters",
                      static_cast<uint64_t>((*worker)->restored_parameters())},
                     {"checkpoint_dir", options.checkpoint_dir},
                     {"folder", (*worker)->restored_folder().empty()
                                    ? std::string("none (no checkpoint yet)")
                                    : (*worker)->restored_folder()}});
    if (!(*worker)->checkpoint_fell_back().empty()) {
      distopt::log::Warning((*worker)->checkpoint_fell_back());
    }
  }
  for (const std::string& kind : (*worker)->plugin_kinds()) {
    distopt::log::Info("optimizer kind from a plugin", {{"kind", kind}});
  }
  for (const std::string& kind : (*worker)->rejected_plugin_kinds()) {
    distopt::log::Warning(
        "a plugin's optimizer kind was ignored: the name is "
        "taken",
        {{"kind", kind}});
  }
  // One parseable line for launchers and tests.
  std::printf(
      "distopt_worker listening address=%s port=%d device=%s pid=%d%s\n",
      (*worker)->address().c_str(), (*worker)->port(),
      options.device.ToString().c_str(), static_cast<int>(getpid()),
      (*worker)->metrics_address().empty()
          ? ""
          : absl::StrCat(" metrics=", (*worker)->metrics_address()).c_str());
  std::fflush(stdout);
  distopt::log::Info("serving", {{"address", (*worker)->address()},
                                 {"device", options.device.ToString()},
                                 {"metrics", (*worker)->metrics_address()},
                                 {"version", distopt::kVersion}});

  pthread_sigmask(SIG_UNBLOCK, &shutdown_signals, nullptr);
  const int signal_number = AwaitShutdownSignal();
  distopt::log::Info(
      "finishing in-flight calls",
      {{"signal", signal_number == SIGTERM ? "SIGTERM" : "SIGINT"}});
  // The grace is a promise: a call that outlives it (a step waiting in a
  // collective for a rank that never comes, bounded only by the
  // collective's timeout) does not hold the daemon. The parameters may be
  // mid-step then, so no checkpoint is saved; the last good one stays.
  std::thread watchdog(
      [worker = worker->get(), grace = options.shutdown_grace] {
        if (worker->CallsEndedWithin(grace + kShutdownMargin)) return;
        if (!worker->AbandonCalls()) return;  // They ended just now.
        distopt::log::Error(
            absl::StrCat("calls still running ",
                         absl::FormatDuration(kShutdownMargin),
                         " after --shutdown_grace (a collective waiting for "
                         "other ranks?); exiting without them, no checkpoint "
                         "saved"),
            {{"shutdown_grace", absl::FormatDuration(grace)},
             {"exit_code", kExitCallsOutlivedGrace}});
        std::_Exit(kExitCallsOutlivedGrace);
      });
  absl::Status saved = (*worker)->Shutdown();
  watchdog.join();
  if (!saved.ok()) {
    return Fail(kExitCheckpointNotSaved,
                absl::DataLossError(absl::StrCat(
                    "saving parameters to --checkpoint_dir failed: ",
                    saved.message())));
  }
  if (!options.checkpoint_dir.empty()) {
    distopt::log::Info(
        "saved",
        {{"parameters", static_cast<uint64_t>((*worker)->saved_parameters())},
         {"checkpoint_dir", options.checkpoint_dir}});
  }
  distopt::log::Info("stopped");
  return 0;
}
