// A secret a call carries in its metadata (the daemon's bearer token, the
// group's secret), checked the one way both checks need: exactly one value
// under its key, compared in constant time. Two values would let a check
// that reads one pass a call that carries another.
#ifndef DISTOPT_SERVER_SERVICES_METADATA_SECRET_H_
#define DISTOPT_SERVER_SERVICES_METADATA_SECRET_H_

#include <map>

#include "absl/strings/string_view.h"
#include "grpcpp/support/string_ref.h"

namespace distopt {

// A call's metadata, as gRPC hands it to a server (ServerContext's
// client_metadata(), an AuthMetadataProcessor's input).
using CallMetadata = std::multimap<grpc::string_ref, grpc::string_ref>;

enum class SecretCheck { kMatches, kMissing, kRepeated, kWrong };

// How `metadata` carries `secret` under `key`.
SecretCheck CheckSecret(const CallMetadata& metadata, absl::string_view key,
                        absl::string_view secret);

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_METADATA_SECRET_H_
