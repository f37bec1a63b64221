// Timing for the benchmarks: the one place that reads the clock, and the
// statistics they report.
#ifndef DISTOPT_BENCH_TIMING_H_
#define DISTOPT_BENCH_TIMING_H_

#include <algorithm>
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
