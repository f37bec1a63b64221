// distoptctl's commands, one file each. A command prints a table, or under
// --json one JSON document, on the invocation's output, and returns
// kExitOk, or kExitFailed once it has reported every failed call.
#ifndef DISTOPT_TOOLS_DISTOPTCTL_COMMANDS_H_
#define DISTOPT_TOOLS_DISTOPTCTL_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tools/distoptctl/invocation.h"

namespace distopt {
namespace distoptctl {

// Health, version, device, uptime, parameters and their bytes, optimizers,
// contexts, streams, memory budget, RSS, group, metrics address: a column
// per worker (a failed one says its error code).
int StatusCommand(const Invocation& invocation,
                  const std::vector<std::string>& addresses);

// The parameters whose names start with `prefix`.
int ParametersCommand(const Invocation& invocation, const std::string& address,
                      const std::string& prefix);

int OptimizersCommand(const Invocation& invocation, const std::string& address);

// The autograd contexts alive (under mutual TLS: the caller's own).
int ContextsCommand(const Invocation& invocation, const std::string& address);

// The data-parallel group: rank, size, state, round, and the ranks lost.
int GroupCommand(const Invocation& invocation, const std::string& address);

// The checkpoints kept; with `save`, saves one first.
int CheckpointCommand(const Invocation& invocation, const std::string& address,
                      bool save);

struct TopOptions {
  absl::Duration interval = absl::Seconds(1);
  // Refreshes before returning; 0: until interrupted.
  int iterations = 0;
  // Clears the screen before each table (when the output is a terminal).
  bool clear_screen = false;
};

// Every interval: step rates and latencies, call rates and bytes,
// contexts, a row per worker (under --json, a document per line).
int TopCommand(const Invocation& invocation,
               const std::vector<std::string>& addresses,
               const TopOptions& options);

}  // namespace distoptctl
}  // namespace distopt

#endif  // DISTOPT_TOOLS_DISTOPTCTL_COMMANDS_H_
