#include "server/comm/collective_metrics.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"

namespace distopt {
namespace {

struct CollectiveMetrics {
  prometheus::Histogram* seconds;
  prometheus::Counter* bytes;
  prometheus::Counter* failures;
};

// The metrics of (backend, operation), made at the first collective of the
// pair and found without building labels after that: collectives run many
// times a step. The names are string literals, so their views stay valid.
const CollectiveMetrics& MetricsOf(absl::string_view backend,
                                   absl::string_view operation) {
  static absl::Mutex* const mutex = new absl::Mutex;
  static auto* const known =
      new absl::flat_hash_map<std::pair<absl::string_view, absl::string_view>,
                              CollectiveMetrics>;
  {
    absl::ReaderMutexLock lock(mutex);
    auto it = known->find(std::make_pair(backend, operation));
    if (it != known->end()) return it->second;
  }
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
  const CollectiveMetrics made{&metrics::LatencyWith(latency, labels),
                               &metrics::CounterWith(buffer_bytes, labels),
                               &metrics::CounterWith(failures, labels)};
  absl::MutexLock lock(mutex);
  return known->emplace(std::make_pair(backend, operation), made).first->second;
}

}  // namespace

void RecordCollective(absl::string_view backend, absl::string_view operation,
                      size_t bytes, double seconds,
                      const absl::Status& status) {
  if (!metrics::Recording()) return;
  const CollectiveMetrics& m = MetricsOf(backend, operation);
  metrics::Observe(*m.seconds, seconds);
  metrics::Add(*m.bytes, static_cast<double>(bytes));
  if (!status.ok()) metrics::Add(*m.failures);
}

}  // namespace distopt
