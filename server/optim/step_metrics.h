// What /metrics shows of optimizer steps, by the optimizer that ran them
// ("distributed": the OptimizerService's; "zero"; "post_local_sgd") and
// its kind ("adam", ...): a latency histogram, steps by result, and
// parameters stepped or skipped (no gradient in the context).
#ifndef DISTOPT_SERVER_OPTIM_STEP_METRICS_H_
#define DISTOPT_SERVER_OPTIM_STEP_METRICS_H_

#include "absl/strings/string_view.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"

namespace distopt {

struct StepMetrics {
  // The metrics of one (optimizer, kind), registered at the first call.
  static const StepMetrics& For(absl::string_view optimizer,
                                absl::string_view kind);

  // A step that changed the parameters, in `seconds`.
  void Applied(double seconds, int stepped, int skipped) const;
  // A retry of a step already applied: nothing changed.
  void Retried() const;
  // A refused or failed step.
  void Failed() const;

  prometheus::Histogram& seconds;
  prometheus::Counter& applied;
  prometheus::Counter& retried;
  prometheus::Counter& failed;
  prometheus::Counter& stepped;
  prometheus::Counter& skipped;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_STEP_METRICS_H_
