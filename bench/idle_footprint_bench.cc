// The memory an idle CPU daemon holds (issue 17, "Footprint"): a real
// distopt_worker on this machine, started, asked once that it serves, then
// left alone; its VmRSS, RssAnon and RssFile and its largest mappings
// (/proc/PID/smaps), against the goal of at most 50 MB (1 MB = 1000 kB,
// as the issue counts).
//
//   bazel run -c opt //bench:idle_footprint_bench [-- DAEMON_FLAGS...]
//
// DAEMON_FLAGS go to the daemon as they are, e.g. --max_threads=8.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/local_worker.h"

namespace distopt {
namespace {

constexpr int64_t kGoalKb = 50 * 1000;
constexpr size_t kLargestMappings = 12;
// Time for the threads that start-up wakes to go idle.
constexpr absl::Duration kSettle = absl::Seconds(1);

double Mb(int64_t kb) { return kb / 1000.0; }

int Run(std::vector<std::string> flags) {
  LocalWorkerOptions options;
  options.flags = std::move(flags);
  absl::StatusOr<std::unique_ptr<LocalWorker>> worker =
      LocalWorker::Start(options);
  if (!worker.ok()) {
    std::fprintf(stderr, "cannot start distopt_worker: %s\n",
                 worker.status().ToString().c_str());
    return 1;
  }
  {
    Client client;
    absl::StatusOr<std::vector<ParameterInfo>> listed =
        client.ListParameters((*worker)->address());
    if (!listed.ok()) {
      std::fprintf(stderr, "distopt_worker does not serve: %s\n",
                   listed.status().ToString().c_str());
      return 1;
    }
  }
  absl::SleepFor(kSettle);

  const LocalWorker& daemon = **worker;
  const int64_t rss = daemon.ProcStatus("VmRSS");
  const int64_t anonymous = daemon.ProcStatus("RssAnon");
  const int64_t file = daemon.ProcStatus("RssFile");
  const std::vector<ResidentMapping> mappings = daemon.ResidentMappings();
  if (rss < 0 || mappings.empty()) {
    std::fprintf(stderr, "cannot read /proc/%d/status and smaps\n",
                 static_cast<int>(daemon.pid()));
    return 1;
  }
  absl::PrintF(
      "idle distopt_worker (pid %d, %s): VmRSS %.1f MB (RssAnon %.1f MB, "
      "RssFile %.1f MB), %d threads\n",
      daemon.pid(), daemon.address(), Mb(rss), Mb(anonymous), Mb(file),
      daemon.ProcStatus("Threads"));
  absl::PrintF("goal: VmRSS <= %.1f MB; measured / goal = %.2f (%s)\n",
               Mb(kGoalKb), static_cast<double>(rss) / kGoalKb,
               rss <= kGoalKb ? "met" : "NOT met");
  absl::PrintF("largest mappings (a file's segments together):\n");
  absl::PrintF("%9s %9s %10s %5s  %s\n", "rss MB", "anon MB", "size MB", "maps",
               "mapping");
  for (size_t i = 0; i < kLargestMappings && i < mappings.size(); ++i) {
    const ResidentMapping& m = mappings[i];
    absl::PrintF("%9.1f %9.1f %10.1f %5d  %s\n", Mb(m.rss_kb),
                 Mb(m.anonymous_kb), Mb(m.size_kb), m.mappings, m.name);
  }
  // Thread stacks, the heap, malloc's arenas, what libraries allocated:
  // each small, so rarely among the largest.
  ResidentMapping unnamed;
  for (const ResidentMapping& m : mappings) {
    if (m.name[0] != '/') {
      unnamed.rss_kb += m.rss_kb;
      unnamed.anonymous_kb += m.anonymous_kb;
      unnamed.size_kb += m.size_kb;
      unnamed.mappings += m.mappings;
    }
  }
  absl::PrintF("%9.1f %9.1f %10.1f %5d  (all mappings without a file)\n",
               Mb(unnamed.rss_kb), Mb(unnamed.anonymous_kb),
               Mb(unnamed.size_kb), unnamed.mappings);
  absl::StatusOr<int> code = (*worker)->Stop();
  return code.ok() && *code == 0 ? 0 : 1;
}

}  // namespace
}  // namespace distopt

int main(int argc, char** argv) {
  return distopt::Run(std::vector<std::string>(argv + 1, argv + argc));
}
