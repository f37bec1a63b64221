// distoptctl status ADDR...: grpc.health.v1's Check, then
// StatusService.GetStatus, of every worker at once.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/distoptctl/commands.h"
#include "tools/distoptctl/metric_snapshot.h"
#include "tools/distoptctl/table.h"
#include "tools/distoptctl/units.h"

namespace distopt {
namespace distoptctl {
namespace {

using ::grpc::health::v1::HealthCheckResponse;

struct WorkerReport {
  absl::Status failure;
  std::string health;
  // Set when both calls answered.
  std::optional<MetricSnapshot> snapshot;
};

WorkerReport Inspect(Client& client, const std::string& address) {
  WorkerReport report;
  absl::StatusOr<HealthCheckResponse::ServingStatus> health =
      client.CheckHealth(address);
  if (!health.ok()) {
    report.failure = health.status();
    return report;
  }
  report.health = HealthCheckResponse::ServingStatus_Name(*health);
  v1::GetStatusRequest request;
  request.set_metric_prefix("distopt_");
  absl::StatusOr<v1::WorkerStatus> status = client.GetStatus(address, request);
  if (!status.ok()) {
    report.failure = status.status();
    return report;
  }
  report.snapshot.emplace(*std::move(status));
  return report;
}

// A gauge that counts or measures bytes, as a whole number.
int64_t Whole(const MetricSnapshot& snapshot, absl::string_view name,
              const LabelMatch& match = {}) {
  return static_cast<int64_t>(snapshot.Sum(name, match));
}

std::string GroupState(const MetricSnapshot& snapshot) {
  return snapshot.LabelWhere("distopt_group_state", "state", 1)
      .value_or("unknown");
}

// A budget limit of 0 is none.
std::string Limit(int64_t bytes) {
  return bytes > 0 ? FormatBytes(static_cast<double>(bytes)) : "unlimited";
}

std::string OrDash(const std::string& text) {
  return text.empty() ? "-" : text;
}

void PrintTable(const Invocation& invocation,
                const std::vector<std::string>& addresses,
                const std::vector<WorkerReport>& reports) {
  using Cell = std::function<std::string(const MetricSnapshot&)>;
  const std::vector<std::pair<std::string, Cell>> rows = {
      {"version", [](const MetricSnapshot& s) { return s.status().version(); }},
      {"device", [](const MetricSnapshot& s) { return s.status().device(); }},
      {"pid",
       [](const MetricSnapshot& s) { return absl::StrCat(s.status().pid()); }},
      {"uptime",
       [](const MetricSnapshot& s) {
         return FormatSeconds(s.uptime_seconds());
       }},
      {"parameters",
       [](const MetricSnapshot& s) {
         return absl::StrCat(Whole(s, "distopt_parameters"), " (",
                             FormatBytes(s.Sum("distopt_parameter_bytes")),
                             ")");
       }},
      {"optimizers",
       [](const MetricSnapshot& s) {
         return absl::StrCat(Whole(s, "distopt_optimizers"));
       }},
      {"contexts",
       [](const MetricSnapshot& s) {
         return absl::StrCat(Whole(s, "distopt_autograd_contexts"));
       }},
      {"streams",
       [](const MetricSnapshot& s) {
         return absl::StrCat(Whole(s, "distopt_streams_open"));
       }},
      {"memory budget",
       [](const MetricSnapshot& s) {
         return absl::StrCat(
             FormatBytes(s.Sum("distopt_memory_budget_used_bytes")), " of ",
             Limit(Whole(s, "distopt_memory_budget_limit_bytes",
                         {{"limit", "total"}})));
       }},
      {"rss",
       [](const MetricSnapshot& s) {
         return FormatBytes(s.Sum("distopt_resident_memory_bytes"));
       }},
      {"group",
       [](const MetricSnapshot& s) {
         return absl::StrCat("rank ", s.status().rank(), " of ",
                             s.status().world_size(), ", ", GroupState(s),
                             ", round ", Whole(s, "distopt_group_round"));
       }},
      {"lost ranks",
       [](const MetricSnapshot& s) {
         return absl::StrCat(Whole(s, "distopt_group_lost_ranks"));
       }},
      {"checkpoints",
       [](const MetricSnapshot& s) {
         return OrDash(s.status().checkpoint_dir());
       }},
      {"metrics",
       [](const MetricSnapshot& s) {
         return OrDash(s.status().metrics_address());
       }},
  };
  Table table;
  std::vector<std::string> header = {"address"};
  std::vector<std::string> health = {"health"};
  for (size_t i = 0; i < addresses.size(); ++i) {
    header.push_back(addresses[i]);
    health.push_back(reports[i].snapshot.has_value()
                         ? reports[i].health
                         : absl::StatusCodeToString(reports[i].failure.code()));
  }
  table.AddRow(std::move(header));
  table.AddRow(std::move(health));
  for (const auto& [name, cell] : rows) {
    std::vector<std::string> row = {name};
    for (const WorkerReport& report : reports) {
      row.push_back(report.snapshot.has_value() ? cell(*report.snapshot) : "-");
    }
    table.AddRow(std::move(row));
  }
  *invocation.out << table.Render();
}

void WriteWorker(JsonWriter& json, const MetricSnapshot& s) {
  const v1::WorkerStatus& status = s.status();
  json.Field("version", status.version())
      .Field("device", status.device())
      .Field("cuda_built", status.cuda_built())
      .Field("pid", status.pid())
      .Field("uptime_seconds", status.uptime_seconds())
      .Field("parameters", Whole(s, "distopt_parameters"))
      .Field("parameter_bytes", Whole(s, "distopt_parameter_bytes"))
      .Field("optimizers", Whole(s, "distopt_optimizers"))
      .Field("autograd_contexts", Whole(s, "distopt_autograd_contexts"))
      .Field("streams_open", Whole(s, "distopt_streams_open"));
  json.Key("memory_budget")
      .BeginObject()
      .Field("used_bytes", Whole(s, "distopt_memory_budget_used_bytes"))
      .Field("total_limit_bytes", Whole(s, "distopt_memory_budget_limit_bytes",
                                        {{"limit", "total"}}))
      .Field("tensor_limit_bytes", Whole(s, "distopt_memory_budget_limit_bytes",
                                         {{"limit", "tensor"}}))
      .EndObject();
  json.Field("resident_memory_bytes",
             Whole(s, "distopt_resident_memory_bytes"));
  json.Key("group")
      .BeginObject()
      .Field("rank", status.rank())
      .Field("world_size", status.world_size())
      .Field("state", GroupState(s))
      .Field("round", Whole(s, "distopt_group_round"))
      .Field("lost_ranks", Whole(s, "distopt_group_lost_ranks"))
      .EndObject();
  json.Field("checkpoint_dir", status.checkpoint_dir())
      .Field("metrics_address", status.metrics_address());
}

void PrintJson(const Invocation& invocation,
               const std::vector<std::string>& addresses,
               const std::vector<WorkerReport>& reports) {
  JsonWriter json;
  json.BeginObject().Key("workers").BeginArray();
  for (size_t i = 0; i < addresses.size(); ++i) {
    json.BeginObject().Field("address", addresses[i]);
    if (reports[i].snapshot.has_value()) {
      json.Field("health", reports[i].health);
      WriteWorker(json, *reports[i].snapshot);
    } else {
      WriteJsonError(json, addresses[i], reports[i].failure);
    }
    json.EndObject();
  }
  json.EndArray().EndObject();
  *invocation.out << json.text() << "\n";
}

}  // namespace

int StatusCommand(const Invocation& invocation,
                  const std::vector<std::string>& addresses) {
  const std::vector<WorkerReport> reports =
      OnEveryWorker<WorkerReport>(addresses, [&](const std::string& address) {
        return Inspect(*invocation.client, address);
      });
  int code = kExitOk;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (reports[i].snapshot.has_value()) continue;
    ReportFailure(invocation, addresses[i], reports[i].failure);
    code = kExitFailed;
  }
  if (invocation.json) {
    PrintJson(invocation, addresses, reports);
  } else {
    PrintTable(invocation, addresses, reports);
  }
  return code;
}

}  // namespace distoptctl
}  // namespace distopt
