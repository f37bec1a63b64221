// WorkerRates: what `distoptctl top` shows of one daemon, from two of its
// metric snapshots: rates over the interval between them and latencies of
// the steps taken in it (not since the daemon started).
#ifndef DISTOPT_TOOLS_DISTOPTCTL_WORKER_RATES_H_
#define DISTOPT_TOOLS_DISTOPTCTL_WORKER_RATES_H_

#include <optional>

#include "tools/distoptctl/metric_snapshot.h"

namespace distopt {
namespace distoptctl {

// The service whose calls are top's own reads: left out of the RPC
// figures, so that an idle daemon shows no traffic.
inline constexpr char kStatusServiceName[] = "distopt.v1.StatusService";

struct WorkerRates {
  // Between the snapshots, by the daemon's clock.
  double seconds = 0;
  // Optimizer steps applied (every optimizer: distributed, ZeRO, post-local
  // SGD; every kind).
  double steps_per_second = 0;
  // Of the steps in the interval; nullopt when none was taken.
  std::optional<double> step_p50_seconds;
  std::optional<double> step_p99_seconds;
  // Calls ended, and those that ended with a code other than OK.
  double rpcs_per_second = 0;
  double refused_rpcs_per_second = 0;
  // Request and reply message bytes.
  double received_bytes_per_second = 0;
  double sent_bytes_per_second = 0;
  // Autograd contexts alive at the later snapshot.
  double autograd_contexts = 0;
};

// nullopt when no time passed between the snapshots or the daemon
// restarted in between (its uptime went back).
std::optional<WorkerRates> RatesBetween(const MetricSnapshot& earlier,
                                        const MetricSnapshot& later);

}  // namespace distoptctl
}  // namespace distopt

#endif  // DISTOPT_TOOLS_DISTOPTCTL_WORKER_RATES_H_
