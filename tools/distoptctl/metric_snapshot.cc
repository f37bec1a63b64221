#include "tools/distoptctl/metric_snapshot.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace distopt {
namespace distoptctl {
namespace {

bool Matches(const v1::Metric& metric, const LabelMatch& match) {
  for (const auto& [label, value] : match) {
    auto it = metric.labels().find(label);
    if (it == metric.labels().end() || it->second != value) return false;
  }
  return true;
}

}  // namespace

MetricSnapshot::MetricSnapshot(v1::WorkerStatus status)
    : status_(std::move(status)) {}

template <typename Visit>
void MetricSnapshot::ForEach(absl::string_view name, const LabelMatch& match,
                             Visit visit) const {
  for (const v1::Metric& metric : status_.metrics()) {
    if (metric.name() == name && Matches(metric, match)) visit(metric);
  }
}

std::optional<double> MetricSnapshot::Find(absl::string_view name,
                                           const LabelMatch& match) const {
  std::optional<double> found;
  ForEach(name, match, [&](const v1::Metric& metric) {
    if (!found.has_value()) found = metric.value();
  });
  return found;
}

double MetricSnapshot::Sum(absl::string_view name,
                           const LabelMatch& match) const {
  double sum = 0;
  ForEach(name, match,
          [&](const v1::Metric& metric) { sum += metric.value(); });
  return sum;
}

std::optional<std::string> MetricSnapshot::LabelWhere(absl::string_view name,
                                                      absl::string_view label,
                                                      double value) const {
  std::optional<std::string> found;
  ForEach(name, {}, [&](const v1::Metric& metric) {
    auto it = metric.labels().find(std::string(label));
    if (!found.has_value() && metric.value() == value &&
        it != metric.labels().end()) {
      found = it->second;
    }
  });
  return found;
}

Histogram MetricSnapshot::SumHistograms(absl::string_view name,
                                        const LabelMatch& match) const {
  // By bound, so that series are added bucket to bucket (every histogram
  // of a family has the same bounds).
  std::map<double, double> by_bound;
  ForEach(name, match, [&](const v1::Metric& metric) {
    const int buckets =
        std::min(metric.bucket_bounds_size(), metric.bucket_counts_size());
    for (int i = 0; i < buckets; ++i) {
      by_bound[metric.bucket_bounds(i)] +=
          static_cast<double>(metric.bucket_counts(i));
    }
  });
  Histogram histogram;
  for (const auto& [bound, count] : by_bound) {
    histogram.bounds.push_back(bound);
    histogram.cumulative.push_back(count);
  }
  return histogram;
}

double Increase(double earlier, double later) {
  return later >= earlier ? later - earlier : later;
}

Histogram Increase(const Histogram& earlier, const Histogram& later) {
  if (earlier.bounds != later.bounds) return later;
  Histogram increase = later;
  for (size_t i = 0; i < later.cumulative.size(); ++i) {
    if (later.cumulative[i] < earlier.cumulative[i]) return later;
    increase.cumulative[i] = later.cumulative[i] - earlier.cumulative[i];
  }
  return increase;
}

std::optional<double> Quantile(double q, const Histogram& histogram) {
  const size_t n = histogram.bounds.size();
  if (n < 2 || n != histogram.cumulative.size() ||
      !std::isinf(histogram.bounds.back()) || histogram.count() <= 0 || q < 0 ||
      q > 1) {
    return std::nullopt;
  }
  const double rank = q * histogram.count();
  size_t b = 0;
  while (b < n - 1 && histogram.cumulative[b] < rank) ++b;
  if (b == n - 1) return histogram.bounds[n - 2];
  if (b == 0 && histogram.bounds[0] <= 0) return histogram.bounds[0];
  const double start = b == 0 ? 0 : histogram.bounds[b - 1];
  const double below = b == 0 ? 0 : histogram.cumulative[b - 1];
  const double in_bucket = histogram.cumulative[b] - below;
  if (in_bucket <= 0) return histogram.bounds[b];
  return start + (histogram.bounds[b] - start) * ((rank - below) / in_bucket);
}

}  // namespace distoptctl
}  // namespace distopt
