#include "python/src/proto_json.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "pybind11/pybind11.h"

namespace distopt {
namespace python {

void ParseJson(const std::string& json, const std::string& argument,
               google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status =
      google::protobuf::util::JsonStringToMessage(json, message, options);
  if (!status.ok()) {
    throw pybind11::value_error(absl::StrCat(
        argument, ": ", status.ToString(), "; expected the fields of ",
        message->GetDescriptor()->full_name()));
  }
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  // Only fails on messages that are not valid, which ours always are.
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

}  // namespace python
}  // namespace distopt
