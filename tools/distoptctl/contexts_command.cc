// distoptctl contexts ADDR: AutogradService.ListContexts, every page.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/distoptctl/commands.h"
#include "tools/distoptctl/table.h"
#include "tools/distoptctl/units.h"

namespace distopt {
namespace distoptctl {
namespace {

using Contexts = std::vector<v1::ContextInfo>;

void WriteJson(JsonWriter& json, const Contexts& contexts) {
  json.Key("contexts").BeginArray();
  for (const v1::ContextInfo& context : contexts) {
    // A string: ids use all 64 bits, past what a JSON reader's double
    // keeps exactly.
    json.BeginObject()
        .Field("context_id", absl::StrCat(context.context_id()))
        .Field("age_ms", context.age_ms())
        .Field("idle_ms", context.idle_ms())
        .Key("parameter_ids")
        .BeginArray();
    for (uint64_t id : context.parameter_ids()) json.Value(id);
    json.EndArray()
        .Field("gradient_bytes", context.bytes())
        .Field("saved_bytes", context.saved_bytes())
        .EndObject();
  }
  json.EndArray();
}

std::string Render(const Contexts& contexts) {
  Table table;
  table.AddRow({"CONTEXT", "AGE", "IDLE", "PARAMETERS", "GRADIENTS", "SAVED"});
  for (const v1::ContextInfo& context : contexts) {
    table.AddRow({absl::StrCat(context.context_id()),
                  FormatSeconds(context.age_ms() / 1e3),
                  FormatSeconds(context.idle_ms() / 1e3),
                  absl::StrCat(context.parameter_ids_size()),
                  FormatBytes(static_cast<double>(context.bytes())),
                  FormatBytes(static_cast<double>(context.saved_bytes()))});
  }
  return table.Render();
}

}  // namespace

int ContextsCommand(const Invocation& invocation, const std::string& address) {
  return PrintResult(invocation, address,
                     invocation.client->ListContexts(address), WriteJson,
                     Render);
}

}  // namespace distoptctl
}  // namespace distopt
