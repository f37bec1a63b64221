#include "common/metrics.h"

#include <atomic>

namespace distopt {
namespace metrics {
namespace {

std::atomic<bool> recording{true};

}  // namespace

const std::shared_ptr<prometheus::Registry>& Registry() {
  static const std::shared_ptr<prometheus::Registry>* const registry =
      new std::shared_ptr<prometheus::Registry>(
          std::make_shared<prometheus::Registry>());
  return *registry;
}

bool Recording() { return recording.load(std::memory_order_relaxed); }
void SetRecording(bool on) { recording.store(on, std::memory_order_relaxed); }

const std::vector<double>& LatencyBuckets() {
  // 1-2.5-5 per decade, as the bounds a reader rounds to.
  static const std::vector<double>* const buckets = new std::vector<double>{
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,     0.25,   0.5,     1,      2.5,   5,      10,    25,   50,    120};
  return *buckets;
}

prometheus::Family<prometheus::Counter>& CounterFamily(absl::string_view name,
                                                       absl::string_view help) {
  return prometheus::BuildCounter()
      .Name(std::string(name))
      .Help(std::string(help))
      .Register(*Registry());
}

prometheus::Family<prometheus::Gauge>& GaugeFamily(absl::string_view name,
                                                   absl::string_view help) {
  return prometheus::BuildGauge()
      .Name(std::string(name))
      .Help(std::string(help))
      .Register(*Registry());
}

prometheus::Family<prometheus::Histogram>& LatencyFamily(
    absl::string_view name, absl::string_view help) {
  return prometheus::BuildHistogram()
      .Name(std::string(name))
      .Help(std::string(help))
      .Register(*Registry());
}

prometheus::Counter& CounterWith(
    prometheus::Family<prometheus::Counter>& family,
    const prometheus::Labels& labels) {
  return family.Add(labels);
}

prometheus::Histogram& LatencyWith(
    prometheus::Family<prometheus::Histogram>& family,
    const prometheus::Labels& labels) {
  return family.Add(labels, LatencyBuckets());
}

}  // namespace metrics
}  // namespace distopt
