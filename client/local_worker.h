// LocalWorker: starts a distopt_worker process on this machine and stops it.
//
// The daemon listens on 127.0.0.1 with a port the OS picks and reports it
// through --port_file, so nothing guesses ports. Used by the examples, the
// integration tests and the benchmarks; a trainer can use it to bring up
// workers for a single-machine run. Not thread-safe.
#ifndef DISTOPT_CLIENT_LOCAL_WORKER_H_
#define DISTOPT_CLIENT_LOCAL_WORKER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace distopt {

// Resident memory of a file's mappings together, or of one anonymous
// mapping, in a process (from /proc/<pid>/smaps).
struct ResidentMapping {
  // The file's path; "[heap]", "[stack]"; for an anonymous mapping
  // "[anonymous]", or "[anonymous after NAME]" when it starts where a
  // mapping of file NAME (its base name) ends: that library's .bss or what
  // its code mapped there.
  std::string name;
  int64_t size_kb = 0;       // address space
  int64_t rss_kb = 0;        // resident
  int64_t anonymous_kb = 0;  // of rss_kb, anonymous (written, not file-backed)
  int mappings = 0;          // how many it sums (a file's segments)
};

struct LocalWorkerOptions {
  // Path of distopt_worker; empty means FindWorkerBinary().
  std::string binary;
  // Extra flags, for example {"--device=cuda:0", "--max_total_bytes=..."}.
  std::vector<std::string> flags;
  // For a rank of a data-parallel group: the group's secret, written to a
  // private file that --group_secret_file names. The same on every rank.
  std::string group_secret;
  // A command the daemon is started through, which must exec it in its own
  // process (the pid stays the daemon's): {"/usr/sbin/ip", "netns", "exec",
  // "host1"} starts it in network namespace host1. Empty: none.
  std::vector<std::string> launcher;
  absl::Duration start_timeout = absl::Seconds(30);
};

class LocalWorker {
 public:
  // Starts the daemon and waits until it serves. FAILED_PRECONDITION with
  // the daemon's exit code if it exits first, DEADLINE_EXCEEDED if it does
  // not report a port in time.
  static absl::StatusOr<std::unique_ptr<LocalWorker>> Start(
      const LocalWorkerOptions& options);
  // Stops the daemon (SIGTERM, then SIGKILL after 30 s) if still running.
  ~LocalWorker();
  LocalWorker(const LocalWorker&) = delete;
  LocalWorker& operator=(const LocalWorker&) = delete;

  // "127.0.0.1:PORT".
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // A field of /proc/<pid>/status as a number ("VmRSS", "VmHWM" in kB;
  // "Threads"); -1 if unknown.
  int64_t ProcStatus(absl::string_view field) const;
  // The daemon's resident memory by mapping, largest first; empty if
  // unknown.
  std::vector<ResidentMapping> ResidentMappings() const;
  // Resets the daemon's peak RSS (VmHWM) to its present RSS, so that a
  // later VmHWM is the peak of what ran since; false if the kernel refused.
  bool ResetPeakMemory() const;

  // Sends `signal_number` to the daemon.
  void Signal(int signal_number);
  // Waits for the daemon to exit, up to `timeout`; returns its exit code
  // (128 + N when killed by signal N), DEADLINE_EXCEEDED on timeout.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // SIGTERM and Wait(); SIGKILL if the daemon does not exit within `timeout`.
  absl::StatusOr<int> Stop(absl::Duration timeout = absl::Seconds(30));

 private:
  LocalWorker(pid_t pid, std::string address, std::string temp_dir)
      : pid_(pid),
        address_(std::move(address)),
        temp_dir_(std::move(temp_dir)) {}

  pid_t pid_;
  std::string address_;
  std::string temp_dir_;
  bool exited_ = false;
  int exit_code_ = 0;
};

// Finds distopt_worker: $DISTOPT_WORKER_BINARY, else the Bazel runfiles of
// the running program (tests, `bazel run`), else next to the program.
absl::StatusOr<std::string> FindWorkerBinary();

}  // namespace distopt

#endif  // DISTOPT_CLIENT_LOCAL_WORKER_H_
