#include "tools/distoptctl/worker_rates.h"

namespace distopt {
namespace distoptctl {
namespace {

// A counter summed over its series, less top's own StatusService calls.
double CallsCounter(const MetricSnapshot& snapshot, absl::string_view name,
                    LabelMatch match = {}) {
  const double all = snapshot.Sum(name, match);
  match["service"] = kStatusServiceName;
  return all - snapshot.Sum(name, match);
}

// Calls that ended with a code other than OK, less top's own.
double RefusedCalls(const MetricSnapshot& snapshot) {
  return CallsCounter(snapshot, "distopt_rpcs_total") -
         CallsCounter(snapshot, "distopt_rpcs_total", {{"code", "OK"}});
}

}  // namespace

std::optional<WorkerRates> RatesBetween(const MetricSnapshot& earlier,
                                        const MetricSnapshot& later) {
  const double seconds = later.uptime_seconds() - earlier.uptime_seconds();
  if (!(seconds > 0)) return std::nullopt;
  auto rate = [&](double before, double after) {
    return Increase(before, after) / seconds;
  };
  WorkerRates rates;
  rates.seconds = seconds;
  const LabelMatch applied = {{"result", "applied"}};
  rates.steps_per_second =
      rate(earlier.Sum("distopt_optimizer_steps_total", applied),
           later.Sum("distopt_optimizer_steps_total", applied));
  const Histogram steps =
      Increase(earlier.SumHistograms("distopt_optimizer_step_seconds"),
               later.SumHistograms("distopt_optimizer_step_seconds"));
  rates.step_p50_seconds = Quantile(0.5, steps);
  rates.step_p99_seconds = Quantile(0.99, steps);

  rates.rpcs_per_second = rate(CallsCounter(earlier, "distopt_rpcs_total"),
                               CallsCounter(later, "distopt_rpcs_total"));
  rates.refused_rpcs_per_second =
      rate(RefusedCalls(earlier), RefusedCalls(later));
  rates.received_bytes_per_second =
      rate(CallsCounter(earlier, "distopt_rpc_received_bytes_total"),
           CallsCounter(later, "distopt_rpc_received_bytes_total"));
  rates.sent_bytes_per_second =
      rate(CallsCounter(earlier, "distopt_rpc_sent_bytes_total"),
           CallsCounter(later, "distopt_rpc_sent_bytes_total"));
  rates.autograd_contexts = later.Sum("distopt_autograd_contexts");
  return rates;
}

}  // namespace distoptctl
}  // namespace distopt
