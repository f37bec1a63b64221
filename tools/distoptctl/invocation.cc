#include "tools/distoptctl/invocation.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace distopt {
namespace distoptctl {

std::string OneLineMessage(absl::string_view address,
                           const absl::Status& status) {
  absl::string_view message = status.message();
  absl::ConsumePrefix(&message, absl::StrCat("worker ", address, ": "));
  std::string line(message);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return line;
}

void ReportFailure(const Invocation& invocation, absl::string_view address,
                   const absl::Status& status) {
  *invocation.err << "distoptctl: " << address << ": "
                  << absl::StatusCodeToString(status.code()) << ": "
                  << OneLineMessage(address, status) << std::endl;
}

void WriteJsonError(JsonWriter& json, absl::string_view address,
                    const absl::Status& status) {
  json.Key("error")
      .BeginObject()
      .Field("code", absl::StatusCodeToString(status.code()))
      .Field("message", OneLineMessage(address, status))
      .EndObject();
}

}  // namespace distoptctl
}  // namespace distopt
