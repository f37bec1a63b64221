// The figures /metrics reads from the daemon's objects when it is scraped
// (nothing on the step path records them): what the daemon is (build
// info), holds (parameters and bytes, contexts, optimizers, open streams,
// memory against its budget, its resident memory) and where its group
// stands (rank, size, state, round, ranks lost).
#ifndef DISTOPT_SERVER_DAEMON_WORKER_GAUGES_H_
#define DISTOPT_SERVER_DAEMON_WORKER_GAUGES_H_

#include <atomic>
#include <string>
#include <vector>

#include "common/memory_budget.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/autograd/context_table.h"
#include "server/comm/group_membership.h"
#include "server/dist_optim/optimizer_table.h"
#include "server/params/parameter_store.h"
#include "server/services/stream_limits.h"

namespace distopt {

struct GaugeSources {
  std::string device;
  int rank = 0;
  int world_size = 1;
  const ParameterStore* parameters = nullptr;
  const MemoryBudget* budget = nullptr;
  const ContextTable* contexts = nullptr;
  const OptimizerTable* optimizers = nullptr;
  StreamLimits* streams = nullptr;
  // Null until the group is joining, and again once the daemon stops.
  const std::atomic<GroupMembership*>* membership = nullptr;
};

class WorkerGauges : public prometheus::Collectable {
 public:
  // The sources must outlive the last Collect.
  explicit WorkerGauges(GaugeSources sources) : sources_(std::move(sources)) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const GaugeSources sources_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_DAEMON_WORKER_GAUGES_H_
