#include "tools/distoptctl/metric_snapshot.h"

#include <limits>

#include "gtest/gtest.h"
#include "tools/distoptctl/worker_rates.h"

namespace distopt {
namespace distoptctl {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void AddMetric(v1::WorkerStatus& status, const std::string& name,
               const LabelMatch& labels, double value) {
  v1::Metric* metric = status.add_metrics();
  metric->set_name(name);
  metric->set_value(value);
  for (const auto& [label, text] : labels) {
    (*metric->mutable_labels())[label] = text;
  }
}

void AddHistogram(v1::WorkerStatus& status, const std::string& name,
                  const LabelMatch& labels, const Histogram& histogram) {
  v1::Metric* metric = status.add_metrics();
  metric->set_name(name);
  metric->set_type(v1::Metric::HISTOGRAM);
  for (const auto& [label, text] : labels) {
    (*metric->mutable_labels())[label] = text;
  }
  for (size_t i = 0; i < histogram.bounds.size(); ++i) {
    metric->add_bucket_bounds(histogram.bounds[i]);
    metric->add_bucket_counts(static_cast<uint64_t>(histogram.cumulative[i]));
  }
}

TEST(MetricSnapshotTest, FindsAndSumsSeriesByLabels) {
  v1::WorkerStatus status;
  AddMetric(status, "steps", {{"kind", "sgd"}, {"result", "applied"}}, 3);
  AddMetric(status, "steps", {{"kind", "adam"}, {"result", "applied"}}, 4);
  AddMetric(status, "steps", {{"kind", "adam"}, {"result", "failed"}}, 5);
  AddMetric(status, "state", {{"state", "joining"}}, 0);
  AddMetric(status, "state", {{"state", "ready"}}, 1);
  const MetricSnapshot snapshot(status);
  EXPECT_EQ(snapshot.Sum("steps"), 12);
  EXPECT_EQ(snapshot.Sum("steps", {{"result", "applied"}}), 7);
  EXPECT_EQ(snapshot.Sum("missing"), 0);
  EXPECT_EQ(snapshot.Find("steps", {{"kind", "adam"}, {"result", "failed"}}),
            5);
  EXPECT_FALSE(snapshot.Find("steps", {{"kind", "rprop"}}).has_value());
  EXPECT_EQ(snapshot.LabelWhere("state", "state", 1), "ready");
  EXPECT_FALSE(snapshot.LabelWhere("state", "state", 2).has_value());
}

TEST(MetricSnapshotTest, HistogramsOfSeveralSeriesAddBucketByBucket) {
  v1::WorkerStatus status;
  AddHistogram(status, "seconds", {{"kind", "sgd"}},
               {{0.1, 1, kInf}, {1, 2, 3}});
  AddHistogram(status, "seconds", {{"kind", "adam"}},
               {{0.1, 1, kInf}, {4, 4, 5}});
  const Histogram sum = MetricSnapshot(status).SumHistograms("seconds");
  EXPECT_EQ(sum.bounds, (std::vector<double>{0.1, 1, kInf}));
  EXPECT_EQ(sum.cumulative, (std::vector<double>{5, 6, 8}));
  EXPECT_EQ(sum.count(), 8);
}

// The values histogram_quantile gives for the same buckets.
TEST(QuantileTest, InterpolatesWithinTheBucketAsPrometheusDoes) {
  const Histogram h = {{0.001, 0.01, 0.1, kInf}, {0, 10, 10, 10}};
  EXPECT_DOUBLE_EQ(*Quantile(0.5, h), 0.001 + 0.009 * 0.5);
  EXPECT_DOUBLE_EQ(*Quantile(0.99, h), 0.001 + 0.009 * 0.99);
  // In the first bucket, from 0.
  const Histogram first = {{0.001, 0.01, kInf}, {4, 4, 4}};
  EXPECT_DOUBLE_EQ(*Quantile(0.5, first), 0.0005);
  // Across buckets: the rank's bucket, from the count below it.
  const Histogram spread = {{1, 2, 4, kInf}, {2, 6, 10, 10}};
  EXPECT_DOUBLE_EQ(*Quantile(0.5, spread), 1 + 1 * (3.0 / 4));
  EXPECT_DOUBLE_EQ(*Quantile(0.9, spread), 2 + 2 * (3.0 / 4));
}

TEST(QuantileTest, InTheInfBucketIsTheLargestFiniteBound) {
  EXPECT_EQ(*Quantile(0.5, {{0.1, 1, kInf}, {0, 0, 4}}), 1);
}

TEST(QuantileTest, NoneWithoutObservationsOrAnInfBucket) {
  EXPECT_FALSE(Quantile(0.5, {{0.1, 1, kInf}, {0, 0, 0}}).has_value());
  EXPECT_FALSE(Quantile(0.5, {{0.1, 1}, {1, 2}}).has_value());
  EXPECT_FALSE(Quantile(0.5, {}).has_value());
}

TEST(IncreaseTest, ACounterThatWentDownWasReset) {
  EXPECT_EQ(Increase(10, 25), 15);
  EXPECT_EQ(Increase(10, 4), 4);
  const Histogram before = {{1, kInf}, {2, 3}};
  const Histogram after = {{1, kInf}, {5, 9}};
  EXPECT_EQ(Increase(before, after).cumulative, (std::vector<double>{3, 6}));
  const Histogram reset = {{1, kInf}, {1, 1}};
  EXPECT_EQ(Increase(before, reset).cumulative, reset.cumulative);
  // A histogram that did not exist before counts whole.
  EXPECT_EQ(Increase(Histogram(), after).cumulative, after.cumulative);
}

v1::WorkerStatus Status(double uptime, double applied, double retried,
                        double ok_calls, double refused_calls,
                        double status_calls, double fast_steps,
                        double slow_steps) {
  v1::WorkerStatus status;
  status.set_uptime_seconds(uptime);
  AddMetric(
      status, "distopt_optimizer_steps_total",
      {{"optimizer", "distributed"}, {"kind", "sgd"}, {"result", "applied"}},
      applied);
  AddMetric(
      status, "distopt_optimizer_steps_total",
      {{"optimizer", "distributed"}, {"kind", "sgd"}, {"result", "retried"}},
      retried);
  AddHistogram(
      status, "distopt_optimizer_step_seconds",
      {{"optimizer", "distributed"}, {"kind", "sgd"}},
      {{0.001, 0.01, kInf},
       {fast_steps, fast_steps + slow_steps, fast_steps + slow_steps}});
  const std::string kParameters = "distopt.v1.ParameterService";
  AddMetric(
      status, "distopt_rpcs_total",
      {{"service", kParameters}, {"method", "GetParameter"}, {"code", "OK"}},
      ok_calls);
  AddMetric(status, "distopt_rpcs_total",
            {{"service", kParameters},
             {"method", "GetParameter"},
             {"code", "NOT_FOUND"}},
            refused_calls);
  AddMetric(status, "distopt_rpcs_total",
            {{"service", kStatusServiceName},
             {"method", "GetStatus"},
             {"code", "OK"}},
            status_calls);
  AddMetric(status, "distopt_rpc_received_bytes_total",
            {{"service", kParameters}, {"method", "GetParameter"}},
            100 * ok_calls);
  AddMetric(status, "distopt_rpc_sent_bytes_total",
            {{"service", kStatusServiceName}, {"method", "GetStatus"}},
            5000 * status_calls);
  AddMetric(status, "distopt_autograd_contexts", {}, 7);
  return status;
}

TEST(WorkerRatesTest, RatesOverTheDaemonsClockLeavingOutStatusCalls) {
  const MetricSnapshot before(Status(10, 100, 5, 40, 2, 9, 50, 0));
  const MetricSnapshot after(Status(12, 140, 9, 60, 6, 11, 50, 40));
  std::optional<WorkerRates> rates = RatesBetween(before, after);
  ASSERT_TRUE(rates.has_value());
  EXPECT_DOUBLE_EQ(rates->seconds, 2);
  EXPECT_DOUBLE_EQ(rates->steps_per_second, 20);  // applied only
  EXPECT_DOUBLE_EQ(rates->rpcs_per_second, 12);   // 20 OK + 4 refused
  EXPECT_DOUBLE_EQ(rates->refused_rpcs_per_second, 2);
  EXPECT_DOUBLE_EQ(rates->received_bytes_per_second, 1000);
  EXPECT_DOUBLE_EQ(rates->sent_bytes_per_second, 0);
  EXPECT_EQ(rates->autograd_contexts, 7);
  // The interval's 40 steps were all between 1 and 10 ms; the 50 fast ones
  // before it do not count.
  EXPECT_DOUBLE_EQ(*rates->step_p50_seconds, 0.001 + 0.009 * 0.5);
  EXPECT_DOUBLE_EQ(*rates->step_p99_seconds, 0.001 + 0.009 * 0.99);
}

TEST(WorkerRatesTest, NoStepsNoLatencies) {
  const MetricSnapshot before(Status(10, 100, 0, 0, 0, 0, 50, 0));
  const MetricSnapshot after(Status(11, 100, 0, 0, 0, 0, 50, 0));
  std::optional<WorkerRates> rates = RatesBetween(before, after);
  ASSERT_TRUE(rates.has_value());
  EXPECT_EQ(rates->steps_per_second, 0);
  EXPECT_FALSE(rates->step_p50_seconds.has_value());
}

TEST(WorkerRatesTest, NoneAcrossARestart) {
  const MetricSnapshot before(Status(100, 100, 0, 0, 0, 0, 0, 0));
  const MetricSnapshot after(Status(1, 3, 0, 0, 0, 0, 0, 0));
  EXPECT_FALSE(RatesBetween(before, after).has_value());
  EXPECT_FALSE(RatesBetween(before, before).has_value());
}

}  // namespace
}  // namespace distoptctl
}  // namespace distopt
