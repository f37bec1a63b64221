// Protocol buffer messages to and from JSON text, the form in which the
// Python layer passes requests (as dicts) and receives infos.
#ifndef DISTOPT_PYTHON_SRC_PROTO_JSON_H_
#define DISTOPT_PYTHON_SRC_PROTO_JSON_H_

#include <string>

#include "google/protobuf/message.h"

namespace distopt {
namespace python {

// Raises ValueError naming `argument` when `json` does not parse as the
// message.
void ParseJson(const std::string& json, const std::string& argument,
               google::protobuf::Message* message);
// Field names as in the .proto files; fields at their defaults included.
std::string ToJson(const google::protobuf::Message& message);

}  // namespace python
}  // namespace distopt

#endif  // DISTOPT_PYTHON_SRC_PROTO_JSON_H_
