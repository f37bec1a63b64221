// distoptctl: a command-line tool for operators of distopt_worker daemons.
// See kUsage, and README.md's "distoptctl".
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "tools/distoptctl/arguments.h"
#include "tools/distoptctl/commands.h"
#include "tools/distoptctl/connection.h"
#include "tools/distoptctl/invocation.h"
#include "tools/distoptctl/table.h"

ABSL_FLAG(bool, json, false,
          "print one JSON document instead of tables (top: one per refresh, "
          "a line each)");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5), "deadline of each call");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM file of the CAs that sign the workers' certificates: connect "
          "with TLS");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM file of a client certificate, for workers that require mutual "
          "TLS (with --tls_key_file)");
ABSL_FLAG(std::string, tls_key_file, "", "PEM file of its private key");
ABSL_FLAG(std::string, token_file, "",
          "file of the bearer token the workers require (their "
          "--auth_token_file); needs --tls_ca_file");
ABSL_FLAG(std::string, prefix, "",
          "parameters: only those whose names start with this");
ABSL_FLAG(absl::Duration, interval, absl::Seconds(1),
          "top: time between refreshes");
ABSL_FLAG(int, iterations, 0,
          "top: refreshes before exiting; 0: until interrupted");
ABSL_FLAG(bool, save, false,
          "checkpoint: save a checkpoint now, then list them");

namespace distopt {
namespace distoptctl {
namespace {

constexpr char kUsage[] =
    R"(usage: distoptctl [flags] COMMAND ADDRESS...

Inspects distopt_worker daemons (ADDRESS: host:port, as they --listen).

commands:
  status ADDRESS...      health, version, device, uptime, parameters and
                         bytes, optimizers, contexts, streams, memory budget,
                         RSS, group (rank, state, round, lost ranks), metrics
                         address; a column per worker
  parameters ADDRESS     the parameters (--prefix to filter by name)
  optimizers ADDRESS     the optimizers: kind, parameters, steps,
                         hyperparameters
  contexts ADDRESS       the autograd contexts alive
  group ADDRESS          the data-parallel group: rank, size, state, round,
                         the ranks lost
  checkpoint ADDRESS     the checkpoints kept (--save: save one now first)
  top ADDRESS...         every --interval: steps/s, step latency p50/p99,
                         RPCs/s, refused RPCs/s, bytes in/out per second,
                         contexts

exit codes: 0 ok; 1 a call failed (a line per failure on stderr:
"distoptctl: ADDRESS: CODE: message"); 2 usage error.

flags:
)";

// Every flag distoptctl takes, in the order usage lists them.
constexpr absl::string_view kFlags[] = {
    "json",       "timeout", "tls_ca_file", "tls_cert_file", "tls_key_file",
    "token_file", "prefix",  "interval",    "iterations",    "save"};

// The flags that apply to one command only.
struct CommandFlag {
  absl::string_view flag;
  absl::string_view command;
};
constexpr CommandFlag kCommandFlags[] = {{"prefix", "parameters"},
                                         {"interval", "top"},
                                         {"iterations", "top"},
                                         {"save", "checkpoint"}};

std::string Usage() {
  Table flags;
  for (absl::string_view name : kFlags) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    const std::string value = flag->DefaultValue();
    flags.AddRow({absl::StrCat("  --", name),
                  absl::StrCat(flag->Help(), " (default ",
                               value.empty() ? "\"\"" : value, ")")});
  }
  return absl::StrCat(kUsage, flags.Render());
}

int UsageError(absl::string_view message) {
  std::cerr << "distoptctl: " << message << "\n"
            << "run distoptctl --help for the commands and flags" << std::endl;
  return kExitUsage;
}

int Run(int argc, char** argv) {
  absl::StatusOr<Arguments> arguments = ParseArguments(argc, argv, kFlags);
  if (!arguments.ok()) return UsageError(arguments.status().message());
  if (arguments->help) {
    std::cout << Usage();
    return kExitOk;
  }
  if (arguments->positional.empty()) return UsageError("no command given");
  const std::string command = arguments->positional[0];
  const std::vector<std::string> addresses(arguments->positional.begin() + 1,
                                           arguments->positional.end());

  const bool several = command == "status" || command == "top";
  const bool one = command == "parameters" || command == "optimizers" ||
                   command == "contexts" || command == "group" ||
                   command == "checkpoint";
  if (!several && !one) {
    return UsageError(absl::StrCat("unknown command \"", command, "\""));
  }
  if (addresses.empty()) {
    return UsageError(absl::StrCat(command, ": no worker address given"));
  }
  if (one && addresses.size() > 1) {
    return UsageError(absl::StrCat(command, " takes one address; got ",
                                   absl::StrJoin(addresses, " ")));
  }
  for (const CommandFlag& only : kCommandFlags) {
    if (arguments->flags_set.count(std::string(only.flag)) > 0 &&
        command != only.command) {
      return UsageError(
          absl::StrCat("--", only.flag, " applies to ", only.command, " only"));
    }
  }

  TopOptions top;
  top.interval = absl::GetFlag(FLAGS_interval);
  top.iterations = absl::GetFlag(FLAGS_iterations);
  top.clear_screen = !absl::GetFlag(FLAGS_json) && isatty(STDOUT_FILENO);
  if (top.interval <= absl::ZeroDuration()) {
    return UsageError(
        absl::StrCat("--interval=", absl::FormatDuration(top.interval),
                     ": expected a positive duration"));
  }
  if (top.iterations < 0) {
    return UsageError(absl::StrCat("--iterations=", top.iterations,
                                   ": expected 0 (until interrupted) or more"));
  }

  ConnectionFlags connection;
  connection.timeout = absl::GetFlag(FLAGS_timeout);
  connection.tls_ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  connection.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  connection.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  connection.token_file = absl::GetFlag(FLAGS_token_file);
  absl::StatusOr<ClientOptions> options = MakeClientOptions(connection);
  if (!options.ok()) return UsageError(options.status().message());
  Client client(*std::move(options));
  const Invocation invocation{&client, absl::GetFlag(FLAGS_json), &std::cout,
                              &std::cerr};

  if (command == "status") return StatusCommand(invocation, addresses);
  if (command == "parameters") {
    return ParametersCommand(invocation, addresses[0],
                             absl::GetFlag(FLAGS_prefix));
  }
  if (command == "optimizers")
    return OptimizersCommand(invocation, addresses[0]);
  if (command == "contexts") return ContextsCommand(invocation, addresses[0]);
  if (command == "group") return GroupCommand(invocation, addresses[0]);
  if (command == "checkpoint") {
    return CheckpointCommand(invocation, addresses[0],
                             absl::GetFlag(FLAGS_save));
  }
  return TopCommand(invocation, addresses, top);
}

}  // namespace
}  // namespace distoptctl
}  // namespace distopt

// Under LeakSanitizer (the ASan build of the tests): distoptctl exits as
// soon as its calls are answered, and an OpenSSL object of a TLS handshake
// may still be held by one of gRPC's threads then; Debian's libcrypto is not
// instrumented, so LSan sees only malloc and CRYPTO_zalloc and reports it
// (seen once in a cold CI run, 904 bytes). Not a leak of distoptctl's: an
// allocation of OpenSSL's own, reclaimed with the process. Unused outside
// LSan, which looks the function up.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:CRYPTO_zalloc\n";
}

int main(int argc, char** argv) { return distopt::distoptctl::Run(argc, argv); }
