// distoptctl top ADDR...: StatusService.GetStatus of every worker each
// interval; the rates between one snapshot and the next.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tools/distoptctl/commands.h"
#include "tools/distoptctl/metric_snapshot.h"
#include "tools/distoptctl/table.h"
#include "tools/distoptctl/units.h"
#include "tools/distoptctl/worker_rates.h"

namespace distopt {
namespace distoptctl {
namespace {

// What one worker answered in one refresh.
struct Refresh {
  absl::Status failure;
  std::optional<MetricSnapshot> snapshot;
  // Against the worker's previous snapshot: nullopt on the first answer
  // after a failure, or after a restart.
  std::optional<WorkerRates> rates;
};

Refresh Fetch(Client& client, const std::string& address) {
  v1::GetStatusRequest request;
  request.set_metric_prefix("distopt_");
  absl::StatusOr<v1::WorkerStatus> status = client.GetStatus(address, request);
  Refresh refresh;
  if (status.ok()) {
    refresh.snapshot.emplace(*std::move(status));
  } else {
    refresh.failure = status.status();
  }
  return refresh;
}

void PrintTable(const Invocation& invocation,
                const std::vector<std::string>& addresses,
                const std::vector<Refresh>& refreshes,
                const TopOptions& options) {
  std::string text;
  if (options.clear_screen) text.append("\x1b[H\x1b[2J");
  absl::StrAppend(
      &text, "distoptctl top, every ", absl::FormatDuration(options.interval),
      ", ", absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone()),
      " (rates and step latencies over the interval; StatusService's "
      "calls not counted)\n");
  Table table;
  table.AddRow({"ADDRESS", "STEPS/S", "STEP_P50", "STEP_P99", "RPC/S",
                "REFUSED/S", "IN/S", "OUT/S", "CONTEXTS"});
  for (size_t i = 0; i < addresses.size(); ++i) {
    const Refresh& refresh = refreshes[i];
    if (!refresh.snapshot.has_value()) {
      table.AddRow(
          {addresses[i], absl::StatusCodeToString(refresh.failure.code())});
      continue;
    }
    const std::string contexts = absl::StrCat(static_cast<int64_t>(
        refresh.snapshot->Sum("distopt_autograd_contexts")));
    if (!refresh.rates.has_value()) {
      table.AddRow({addresses[i], "-", "-", "-", "-", "-", "-", "-", contexts});
      continue;
    }
    const WorkerRates& r = *refresh.rates;
    table.AddRow(
        {addresses[i], FormatRate(r.steps_per_second),
         FormatSeconds(r.step_p50_seconds), FormatSeconds(r.step_p99_seconds),
         FormatRate(r.rpcs_per_second), FormatRate(r.refused_rpcs_per_second),
         FormatBytes(r.received_bytes_per_second),
         FormatBytes(r.sent_bytes_per_second), contexts});
  }
  text.append(table.Render());
  if (!options.clear_screen) text.push_back('\n');
  *invocation.out << text << std::flush;
}

// One document, on one line.
void PrintJson(const Invocation& invocation,
               const std::vector<std::string>& addresses,
               const std::vector<Refresh>& refreshes) {
  JsonWriter json;
  json.BeginObject()
      .Field("time_unix_seconds", absl::ToUnixMicros(absl::Now()) / 1e6)
      .Key("workers")
      .BeginArray();
  for (size_t i = 0; i < addresses.size(); ++i) {
    const Refresh& refresh = refreshes[i];
    json.BeginObject().Field("address", addresses[i]);
    if (!refresh.snapshot.has_value()) {
      WriteJsonError(json, addresses[i], refresh.failure);
      json.EndObject();
      continue;
    }
    const std::optional<WorkerRates>& r = refresh.rates;
    auto figure = [&](double WorkerRates::*field) -> std::optional<double> {
      if (!r.has_value()) return std::nullopt;
      return (*r).*field;
    };
    json.Field("interval_seconds", figure(&WorkerRates::seconds))
        .Field("steps_per_second", figure(&WorkerRates::steps_per_second))
        .Field("step_seconds_p50",
               r.has_value() ? r->step_p50_seconds : std::nullopt)
        .Field("step_seconds_p99",
               r.has_value() ? r->step_p99_seconds : std::nullopt)
        .Field("rpcs_per_second", figure(&WorkerRates::rpcs_per_second))
        .Field("refused_rpcs_per_second",
               figure(&WorkerRates::refused_rpcs_per_second))
        .Field("received_bytes_per_second",
               figure(&WorkerRates::received_bytes_per_second))
        .Field("sent_bytes_per_second",
               figure(&WorkerRates::sent_bytes_per_second))
        .Field("autograd_contexts", static_cast<int64_t>(refresh.snapshot->Sum(
                                        "distopt_autograd_contexts")))
        .EndObject();
  }
  json.EndArray().EndObject();
  *invocation.out << json.text() << std::endl;
}

}  // namespace

int TopCommand(const Invocation& invocation,
               const std::vector<std::string>& addresses,
               const TopOptions& options) {
  auto fetch_all = [&] {
    return OnEveryWorker<Refresh>(addresses, [&](const std::string& address) {
      return Fetch(*invocation.client, address);
    });
  };
  int code = kExitOk;
  // A failure is reported when it begins or changes, not on every refresh.
  std::vector<std::string> reported(addresses.size());
  auto report = [&](const std::vector<Refresh>& refreshes) {
    for (size_t i = 0; i < addresses.size(); ++i) {
      if (refreshes[i].snapshot.has_value()) {
        reported[i].clear();
        continue;
      }
      code = kExitFailed;
      const std::string line = refreshes[i].failure.ToString();
      if (line == reported[i]) continue;
      reported[i] = line;
      ReportFailure(invocation, addresses[i], refreshes[i].failure);
    }
  };
  std::vector<Refresh> previous = fetch_all();
  report(previous);
  absl::Time next = absl::Now() + options.interval;
  for (int i = 0; options.iterations == 0 || i < options.iterations; ++i) {
    absl::SleepFor(next - absl::Now());
    next = std::max(next + options.interval, absl::Now());
    std::vector<Refresh> current = fetch_all();
    report(current);
    for (size_t w = 0; w < addresses.size(); ++w) {
      if (current[w].snapshot.has_value() && previous[w].snapshot.has_value()) {
        current[w].rates =
            RatesBetween(*previous[w].snapshot, *current[w].snapshot);
      }
    }
    if (invocation.json) {
      PrintJson(invocation, addresses, current);
    } else {
      PrintTable(invocation, addresses, current, options);
    }
    previous = std::move(current);
  }
  return code;
}

}  // namespace distoptctl
}  // namespace distopt
