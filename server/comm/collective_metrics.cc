#include "server/comm/collective_metrics.h"

#include <string>

#include "common/metrics.h"

namespace distopt {

void RecordCollective(absl::string_view backend, absl::string_view operation,
                      size_t bytes, double seconds,
                      const absl::Status& status) {
  if (!metrics::Recording()) return;
  static auto& latency = metrics::LatencyFamily(
      "distopt_collective_seconds",
      "Time the collectives of the data-parallel group took on this rank");
  static auto& buffer_bytes = metrics::CounterFamily(
      "distopt_collective_bytes_total",
      "Bytes of the buffers the group's collectives ran over on this rank");
  static auto& failures = metrics::CounterFamily(
      "distopt_collective_failures_total",
      "Collectives that failed (a peer lost, a timeout, cancelled)");
  const prometheus::Labels labels{{"backend", std::string(backend)},
                                  {"operation", std::string(operation)}};
  metrics::Observe(metrics::LatencyWith(latency, labels), seconds);
  metrics::Add(metrics::CounterWith(buffer_bytes, labels),
               static_cast<double>(bytes));
  if (!status.ok()) metrics::Add(metrics::CounterWith(failures, labels));
}

}  // namespace distopt
