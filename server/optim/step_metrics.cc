#include "server/optim/step_metrics.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"

namespace distopt {

const StepMetrics& StepMetrics::For(absl::string_view optimizer,
                                    absl::string_view kind) {
  static absl::Mutex* const mutex = new absl::Mutex;
  static auto* const known =
      new absl::flat_hash_map<std::pair<std::string, std::string>,
                              std::unique_ptr<StepMetrics>>;
  absl::MutexLock lock(mutex);
  std::unique_ptr<StepMetrics>& slot =
      (*known)[{std::string(optimizer), std::string(kind)}];
  if (slot == nullptr) {
    static auto& seconds = metrics::LatencyFamily(
        "distopt_optimizer_step_seconds",
        "Time an optimizer step took on this daemon, collectives included");
    static auto& steps = metrics::CounterFamily(
        "distopt_optimizer_steps_total",
        "Optimizer steps by result: applied, retried (a step already "
        "applied, ignored) or failed");
    static auto& parameters = metrics::CounterFamily(
        "distopt_optimizer_step_parameters_total",
        "Parameters of applied steps: stepped, or skipped for want of a "
        "gradient");
    const std::string o(optimizer), k(kind);
    auto with = [&](const char* name, const char* value) {
      return prometheus::Labels{{"optimizer", o}, {"kind", k}, {name, value}};
    };
    slot.reset(new StepMetrics{
        metrics::LatencyWith(seconds, {{"optimizer", o}, {"kind", k}}),
        metrics::CounterWith(steps, with("result", "applied")),
        metrics::CounterWith(steps, with("result", "retried")),
        metrics::CounterWith(steps, with("result", "failed")),
        metrics::CounterWith(parameters, with("outcome", "stepped")),
        metrics::CounterWith(parameters, with("outcome", "skipped"))});
  }
  return *slot;
}

void StepMetrics::Applied(double seconds_taken, int stepped_parameters,
                          int skipped_parameters) const {
  metrics::Observe(seconds, seconds_taken);
  metrics::Add(applied);
  if (stepped_parameters > 0) metrics::Add(stepped, stepped_parameters);
  if (skipped_parameters > 0) metrics::Add(skipped, skipped_parameters);
}

void StepMetrics::Retried() const { metrics::Add(retried); }

void StepMetrics::Failed() const { metrics::Add(failed); }

}  // namespace distopt
