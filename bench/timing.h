// Timing for the benchmarks: the one place that reads the clock, and the
// statistics they report.
#ifndef DISTOPT_BENCH_TIMING_H_
#define DISTOPT_BENCH_TIMING_H_

#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"

namespace distopt {
namespace bench {

// Seconds `work()` takes.
template <typename Work>
double SecondsOf(Work&& work) {
  const absl::Time start = absl::Now();
  work();
  return absl::ToDoubleSeconds(absl::Now() - start);
}

// CPU seconds (user and system) this process has used, all its threads.
inline double ProcessCpuSeconds() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// The cores stretches of work keep this process busy: its CPU seconds over
// wall seconds, summed over every stretch from Begin to End.
class CoresBusy {
 public:
  void Begin() {
    cpu_seconds_ -= ProcessCpuSeconds();
    began_ = absl::Now();
  }
  void End() {
    cpu_seconds_ += ProcessCpuSeconds();
    wall_ += absl::Now() - began_;
  }
  double cores() const { return cpu_seconds_ / absl::ToDoubleSeconds(wall_); }

 private:
  double cpu_seconds_ = 0;
  absl::Time began_;
  absl::Duration wall_;
};

// CPU seconds (user and system) the process `pid` has used, from
// /proc/<pid>/stat (in clock ticks, 10 ms); -1 when it cannot be read.
inline double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  const size_t name_end = stat.rfind(')');  // The name may hold spaces.
  if (name_end == std::string::npos) return -1;
  std::istringstream fields(stat.substr(name_end + 1));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::stod(field);  // utime, stime.
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The value below which `fraction` of `values` lie (nearest rank).
inline double Percentile(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1,
                                static_cast<size_t>(fraction * values.size()));
  return values[index];
}

inline double Median(const std::vector<double>& values) {
  return Percentile(values, 0.5);
}

}  // namespace bench
}  // namespace distopt

#endif  // DISTOPT_BENCH_TIMING_H_
