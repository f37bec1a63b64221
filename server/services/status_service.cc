#include "server/services/status_service.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "prometheus/metric_family.h"

namespace distopt {

void StatusServiceImpl::Describe(const v1::WorkerStatus& description) {
  absl::MutexLock lock(&mutex_);
  description_ = description;
}

grpc::Status StatusServiceImpl::GetStatus(grpc::ServerContext*,
                                          const v1::GetStatusRequest* request,
                                          v1::WorkerStatus* response) {
  {
    absl::MutexLock lock(&mutex_);
    *response = description_;
  }
  response->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - started_));
  if (request->without_metrics()) return grpc::Status::OK;
  for (const auto& weak : collectables_) {
    const std::shared_ptr<prometheus::Collectable> collectable = weak.lock();
    if (collectable == nullptr) continue;
    for (const prometheus::MetricFamily& family : collectable->Collect()) {
      if (!absl::StartsWith(family.name, request->metric_prefix())) continue;
      for (const prometheus::ClientMetric& metric : family.metric) {
        v1::Metric* out = response->add_metrics();
        out->set_name(family.name);
        for (const prometheus::ClientMetric::Label& label : metric.label) {
          (*out->mutable_labels())[label.name] = label.value;
        }
        switch (family.type) {
          case prometheus::MetricType::Counter:
            out->set_type(v1::Metric::COUNTER);
            out->set_value(metric.counter.value);
            break;
          case prometheus::MetricType::Gauge:
            out->set_type(v1::Metric::GAUGE);
            out->set_value(metric.gauge.value);
            break;
          case prometheus::MetricType::Histogram:
            out->set_type(v1::Metric::HISTOGRAM);
            out->set_value(metric.histogram.sample_sum);
            out->set_count(metric.histogram.sample_count);
            for (const auto& bucket : metric.histogram.bucket) {
              out->add_bucket_bounds(bucket.upper_bound);
              out->add_bucket_counts(bucket.cumulative_count);
            }
            break;
          default:  // The daemon makes no other kind.
            out->set_type(v1::Metric::TYPE_UNSPECIFIED);
            break;
        }
      }
    }
  }
  return grpc::Status::OK;
}

}  // namespace distopt
