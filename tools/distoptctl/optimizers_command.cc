// distoptctl optimizers ADDR: OptimizerService.ListOptimizers.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/distoptctl/commands.h"
#include "tools/distoptctl/table.h"

namespace distopt {
namespace distoptctl {
namespace {

// In name order (the wire's map has none).
std::map<std::string, v1::HyperparameterValue> Sorted(
    const v1::OptimizerInfo& optimizer) {
  return {optimizer.hyperparameters().begin(),
          optimizer.hyperparameters().end()};
}

// "0.9", "true", "(0.9,0.999)": no spaces inside a table's cell.
std::string Text(const v1::HyperparameterValue& value) {
  switch (value.value_case()) {
    case v1::HyperparameterValue::kNumber:
      return absl::StrCat(value.number());
    case v1::HyperparameterValue::kFlag:
      return value.flag() ? "true" : "false";
    case v1::HyperparameterValue::kPair:
      return absl::StrCat("(", value.pair().first(), ",", value.pair().second(),
                          ")");
    default:
      return "?";
  }
}

void WriteValue(JsonWriter& json, const v1::HyperparameterValue& value) {
  switch (value.value_case()) {
    case v1::HyperparameterValue::kNumber:
      json.Value(value.number());
      break;
    case v1::HyperparameterValue::kFlag:
      json.Value(value.flag());
      break;
    case v1::HyperparameterValue::kPair:
      json.BeginArray()
          .Value(value.pair().first())
          .Value(value.pair().second())
          .EndArray();
      break;
    default:
      json.Null();
      break;
  }
}

// "1,2,3", or for many "1,2,...,240 (120)".
std::string Ids(const v1::OptimizerInfo& optimizer) {
  const auto& ids = optimizer.parameter_ids();
  if (ids.size() <= 6) return absl::StrJoin(ids, ",");
  return absl::StrCat(ids[0], ",", ids[1], ",...,", ids[ids.size() - 1], " (",
                      ids.size(), ")");
}

using Optimizers = std::vector<v1::OptimizerInfo>;

void WriteJson(JsonWriter& json, const Optimizers& optimizers) {
  json.Key("optimizers").BeginArray();
  for (const v1::OptimizerInfo& optimizer : optimizers) {
    json.BeginObject()
        .Field("id", optimizer.id())
        .Field("kind", optimizer.kind())
        .Key("parameter_ids")
        .BeginArray();
    for (uint64_t id : optimizer.parameter_ids()) json.Value(id);
    json.EndArray()
        .Field("steps", optimizer.steps())
        .Field("device", optimizer.device())
        .Key("hyperparameters")
        .BeginObject();
    for (const auto& [name, value] : Sorted(optimizer)) {
      json.Key(name);
      WriteValue(json, value);
    }
    json.EndObject().EndObject();
  }
  json.EndArray();
}

std::string Render(const Optimizers& optimizers) {
  Table table;
  table.AddRow(
      {"ID", "KIND", "PARAMETERS", "STEPS", "DEVICE", "HYPERPARAMETERS"});
  for (const v1::OptimizerInfo& optimizer : optimizers) {
    std::vector<std::string> hyperparameters;
    for (const auto& [name, value] : Sorted(optimizer)) {
      hyperparameters.push_back(absl::StrCat(name, "=", Text(value)));
    }
    table.AddRow({absl::StrCat(optimizer.id()), optimizer.kind(),
                  Ids(optimizer), absl::StrCat(optimizer.steps()),
                  optimizer.device(), absl::StrJoin(hyperparameters, " ")});
  }
  return table.Render();
}

}  // namespace

int OptimizersCommand(const Invocation& invocation,
                      const std::string& address) {
  return PrintResult(invocation, address,
                     invocation.client->ListOptimizers(address), WriteJson,
                     Render);
}

}  // namespace distoptctl
}  // namespace distopt
