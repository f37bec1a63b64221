// The daemon's metrics: one Prometheus registry per process, and the
// helpers every layer records through.
//
// Names follow Prometheus's conventions: a distopt_ prefix, base units
// (_seconds, _bytes), _total on counters. A family is registered the first
// time it is asked for, and asking again returns the same family (one
// daemon per process; a test that starts several in one process sees them
// summed). Recording costs an atomic add (counters, gauges) or a short
// mutex (histograms); SetRecording(false) turns it into one branch, which
// is how bench/ measures what the metrics cost the step path.
#ifndef DISTOPT_COMMON_METRICS_H_
#define DISTOPT_COMMON_METRICS_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace distopt {
namespace metrics {

// The process's registry, for /metrics and StatusService.
const std::shared_ptr<prometheus::Registry>& Registry();

// Whether the recording helpers below record (default: yes).
bool Recording();
void SetRecording(bool on);

// Bucket bounds in seconds for latencies: 50 us to 120 s, each about 2.5x
// the previous, so a quantile read from them is within that factor.
const std::vector<double>& LatencyBuckets();

prometheus::Family<prometheus::Counter>& CounterFamily(absl::string_view name,
                                                       absl::string_view help);
prometheus::Family<prometheus::Gauge>& GaugeFamily(absl::string_view name,
                                                   absl::string_view help);
// Histograms of this family all use LatencyBuckets().
prometheus::Family<prometheus::Histogram>& LatencyFamily(
    absl::string_view name, absl::string_view help);

// The metric of `family` with `labels`, for recording with the helpers
// below (created at the first call; keep the reference, it stays valid).
prometheus::Counter& CounterWith(
    prometheus::Family<prometheus::Counter>& family,
    const prometheus::Labels& labels);
prometheus::Histogram& LatencyWith(
    prometheus::Family<prometheus::Histogram>& family,
    const prometheus::Labels& labels);

inline void Add(prometheus::Counter& counter, double value = 1) {
  if (Recording()) counter.Increment(value);
}
inline void Observe(prometheus::Histogram& histogram, double seconds) {
  if (Recording()) histogram.Observe(seconds);
}

// Seconds since construction, on the monotonic clock.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start_)
        .count();
  }

 private:
  const std::chrono::steady_clock::time_point start_;
};

}  // namespace metrics
}  // namespace distopt

#endif  // DISTOPT_COMMON_METRICS_H_
