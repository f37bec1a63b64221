// distoptctl parameters ADDR [--prefix=P]: ParameterService.ListParameters.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/shape.h"
#include "tools/distoptctl/commands.h"
#include "tools/distoptctl/table.h"
#include "tools/distoptctl/units.h"

namespace distopt {
namespace distoptctl {
namespace {

using Parameters = std::vector<ParameterInfo>;

void WriteJson(JsonWriter& json, const Parameters& parameters) {
  json.Key("parameters").BeginArray();
  for (const ParameterInfo& p : parameters) {
    json.BeginObject()
        .Field("id", p.id)
        .Field("name", p.name)
        .Field("dtype", DTypeName(p.dtype))
        .Key("shape")
        .BeginArray();
    for (int64_t dimension : p.shape) json.Value(dimension);
    json.EndArray()
        .Field("num_elements", p.num_elements)
        .Field("byte_size", p.byte_size)
        .Field("device", p.device.ToString())
        .Field("version", p.version)
        .EndObject();
  }
  json.EndArray();
}

std::string Render(const Parameters& parameters) {
  Table table;
  table.AddRow({"ID", "NAME", "DTYPE", "SHAPE", "BYTES", "DEVICE", "VERSION"});
  for (const ParameterInfo& p : parameters) {
    table.AddRow({absl::StrCat(p.id), p.name, std::string(DTypeName(p.dtype)),
                  ShapeToString(p.shape),
                  FormatBytes(static_cast<double>(p.byte_size)),
                  p.device.ToString(), absl::StrCat(p.version)});
  }
  return table.Render();
}

}  // namespace

int ParametersCommand(const Invocation& invocation, const std::string& address,
                      const std::string& prefix) {
  return PrintResult(invocation, address,
                     invocation.client->ListParameters(address, prefix),
                     WriteJson, Render);
}

}  // namespace distoptctl
}  // namespace distopt
