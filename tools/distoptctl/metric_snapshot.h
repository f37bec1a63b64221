// MetricSnapshot: the metrics of one StatusService.GetStatus reply, looked
// up by name and labels; and the arithmetic of Prometheus that `top` does
// between two snapshots (a counter's increase, a histogram's increase, and
// a quantile interpolated within buckets as histogram_quantile does).
// Immutable once built: safe to read from several threads.
#ifndef DISTOPT_TOOLS_DISTOPTCTL_METRIC_SNAPSHOT_H_
#define DISTOPT_TOOLS_DISTOPTCTL_METRIC_SNAPSHOT_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "proto/distopt/v1/status.pb.h"

namespace distopt {
namespace distoptctl {

// Labels a series must have (name -> value); others it may have are free.
using LabelMatch = std::map<std::string, std::string>;

// A histogram's buckets: upper bounds in increasing order, the last +Inf,
// and the observations at or below each (cumulative, as Prometheus's).
struct Histogram {
  std::vector<double> bounds;
  std::vector<double> cumulative;

  // Observations in all (the +Inf bucket's count); 0 when empty.
  double count() const { return cumulative.empty() ? 0 : cumulative.back(); }
};

class MetricSnapshot {
 public:
  explicit MetricSnapshot(v1::WorkerStatus status);

  const v1::WorkerStatus& status() const { return status_; }
  // The daemon's uptime when it answered: the clock of rates.
  double uptime_seconds() const { return status_.uptime_seconds(); }

  // The value of the first series of `name` matching `match`; nullopt when
  // none does.
  std::optional<double> Find(absl::string_view name,
                             const LabelMatch& match = {}) const;
  // The values of every series of `name` matching `match`, added (0 when
  // none does).
  double Sum(absl::string_view name, const LabelMatch& match = {}) const;
  // Label `label` of the first series of `name` whose value is `value`:
  // which state a one-hot gauge (distopt_group_state) says.
  std::optional<std::string> LabelWhere(absl::string_view name,
                                        absl::string_view label,
                                        double value) const;
  // The histograms of `name` matching `match`, added bucket by bucket.
  Histogram SumHistograms(absl::string_view name,
                          const LabelMatch& match = {}) const;

 private:
  // Calls `visit` with every series of `name` matching `match`.
  template <typename Visit>
  void ForEach(absl::string_view name, const LabelMatch& match,
               Visit visit) const;

  v1::WorkerStatus status_;
};

// What a counter counted from `earlier` to `later`. A counter that went
// down was reset (its daemon restarted): it counted `later` since.
double Increase(double earlier, double later);
// The same, bucket by bucket. A histogram whose buckets changed or went
// down was reset: `later` whole.
Histogram Increase(const Histogram& earlier, const Histogram& later);

// The q-quantile (0 <= q <= 1) of the observations, as Prometheus's
// histogram_quantile: found in the bucket that holds it and interpolated
// linearly within that bucket's range (from 0 for the first bucket); the
// largest finite bound when it falls in the +Inf bucket. nullopt without
// observations or without a +Inf bucket.
std::optional<double> Quantile(double q, const Histogram& histogram);

}  // namespace distoptctl
}  // namespace distopt

#endif  // DISTOPT_TOOLS_DISTOPTCTL_METRIC_SNAPSHOT_H_
