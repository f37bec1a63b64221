// Programs a test runs beside the daemons (Debian's etcd, Prometheus):
// started without a shell, stopped with SIGTERM (SIGKILL after a grace),
// and the free loopback ports they are told to listen on.
#ifndef DISTOPT_COMMON_TESTING_CHILD_PROCESS_H_
#define DISTOPT_COMMON_TESTING_CHILD_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace distopt {
namespace testing {

// `count` distinct free ports on 127.0.0.1 (bound together, then let go:
// the program binds them next).
std::vector<int> FreeLoopbackPorts(int count);

// Starts args[0] (a path) with `args`; its pid, or -1.
pid_t StartProcess(const std::vector<std::string>& args);

// SIGTERM, then SIGKILL when it has not exited within `grace`; reaps it.
void StopProcess(pid_t pid, absl::Duration grace = absl::Seconds(10));

}  // namespace testing
}  // namespace distopt

#endif  // DISTOPT_COMMON_TESTING_CHILD_PROCESS_H_
