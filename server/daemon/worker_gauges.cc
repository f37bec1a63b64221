#include "server/daemon/worker_gauges.h"

#include "absl/strings/str_cat.h"
#include "common/cuda_ops.h"
#include "common/resident_memory.h"
#include "common/version.h"

namespace distopt {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// A family of one metric without labels.
MetricFamily One(const char* name, const char* help, MetricType type,
                 double value) {
  MetricFamily family{name, help, type, {}};
  ClientMetric metric;
  if (type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(metric);
  return family;
}

ClientMetric Labelled(std::vector<ClientMetric::Label> labels, MetricType type,
                      double value) {
  ClientMetric metric;
  metric.label = std::move(labels);
  if (type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return metric;
}

}  // namespace

std::vector<MetricFamily> WorkerGauges::Collect() const {
  const GaugeSources& s = sources_;
  std::vector<MetricFamily> families;

  MetricFamily build{"distopt_build_info",
                     "Always 1; the labels say what the daemon is",
                     MetricType::Gauge,
                     {}};
  build.metric.push_back(
      Labelled({{"version", kVersion},
                {"cuda", cuda_ops::BuiltWithCuda() ? "true" : "false"},
                {"device", s.device}},
               MetricType::Gauge, 1));
  families.push_back(std::move(build));
  families.push_back(
      One("distopt_resident_memory_bytes", "The daemon's resident memory (RSS)",
          MetricType::Gauge, static_cast<double>(ResidentBytes())));

  const ParameterStore::Census census = s.parameters->Count();
  families.push_back(One("distopt_parameters", "Parameters held",
                         MetricType::Gauge,
                         static_cast<double>(census.parameters)));
  families.push_back(One("distopt_parameter_bytes",
                         "Bytes of the parameters' values", MetricType::Gauge,
                         static_cast<double>(census.bytes)));
  families.push_back(
      One("distopt_optimizers", "Optimizers of the OptimizerService",
          MetricType::Gauge, static_cast<double>(s.optimizers->size())));
  families.push_back(One("distopt_autograd_contexts", "Autograd contexts alive",
                         MetricType::Gauge,
                         static_cast<double>(s.contexts->size())));
  families.push_back(One(
      "distopt_streams_open", "Streams and waiting calls open (--max_streams)",
      MetricType::Gauge, static_cast<double>(s.streams->open())));

  families.push_back(One("distopt_memory_budget_used_bytes",
                         "Bytes held for clients against --max_total_bytes",
                         MetricType::Gauge,
                         static_cast<double>(s.budget->used_bytes())));
  MetricFamily limits{"distopt_memory_budget_limit_bytes",
                      "The budget's limits (0: none)",
                      MetricType::Gauge,
                      {}};
  limits.metric.push_back(
      Labelled({{"limit", "total"}}, MetricType::Gauge,
               static_cast<double>(s.budget->max_total_bytes())));
  limits.metric.push_back(
      Labelled({{"limit", "tensor"}}, MetricType::Gauge,
               static_cast<double>(s.budget->max_tensor_bytes())));
  families.push_back(std::move(limits));
  MetricFamily refusals{"distopt_memory_budget_refusals_total",
                        "Reservations refused, by the limit they would pass",
                        MetricType::Counter,
                        {}};
  refusals.metric.push_back(
      Labelled({{"limit", "total"}}, MetricType::Counter,
               static_cast<double>(s.budget->total_refusals())));
  refusals.metric.push_back(
      Labelled({{"limit", "tensor"}}, MetricType::Counter,
               static_cast<double>(s.budget->tensor_refusals())));
  families.push_back(std::move(refusals));

  families.push_back(One("distopt_group_rank", "This daemon's rank",
                         MetricType::Gauge, s.rank));
  families.push_back(One("distopt_group_world_size", "Ranks in the group",
                         MetricType::Gauge, s.world_size));
  const GroupMembership* membership =
      s.membership != nullptr ? s.membership->load() : nullptr;
  MetricFamily state{"distopt_group_state",
                     "1 for the state the group is in (single, joining, "
                     "ready, failed), 0 for the others",
                     MetricType::Gauge,
                     {}};
  const char* now = s.world_size == 1 ? "single" : "joining";
  double round = 0, lost = 0;
  if (membership != nullptr) {
    switch (membership->state()) {
      case GroupMembership::State::kJoining:
        now = "joining";
        break;
      case GroupMembership::State::kReady:
        now = "ready";
        break;
      case GroupMembership::State::kFailed:
        now = "failed";
        break;
    }
    round = static_cast<double>(membership->round());
    lost = static_cast<double>(membership->lost_ranks().size());
  }
  for (const char* name : {"single", "joining", "ready", "failed"}) {
    state.metric.push_back(Labelled({{"state", name}}, MetricType::Gauge,
                                    std::string(name) == now ? 1 : 0));
  }
  families.push_back(std::move(state));
  families.push_back(One("distopt_group_round",
                         "The group's round: 0 once joined, +1 per "
                         "re-formation",
                         MetricType::Gauge, round));
  families.push_back(One("distopt_group_lost_ranks",
                         "Ranks that no longer answered when a collective "
                         "last failed for want of a peer",
                         MetricType::Gauge, lost));
  return families;
}

}  // namespace distopt
