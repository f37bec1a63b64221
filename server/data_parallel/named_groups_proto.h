// Parameter groups named in a ZeroService or LocalSgdService request
// (v1::ZeroParamGroup), as the data-parallel optimizers take them, and
// back (a checkpoint of a group optimizer keeps its groups so).
#ifndef DISTOPT_SERVER_DATA_PARALLEL_NAMED_GROUPS_PROTO_H_
#define DISTOPT_SERVER_DATA_PARALLEL_NAMED_GROUPS_PROTO_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/repeated_field.h"
#include "proto/distopt/v1/data_parallel.pb.h"
#include "server/data_parallel/named_groups.h"

namespace distopt {

// INVALID_ARGUMENT naming `field` for bad hyperparameters or no
// parameter names.
absl::StatusOr<NamedGroupSpec> NamedGroupFromProto(
    const v1::ZeroParamGroup& proto, const std::string& field);

// The same for every group of `groups` ("groups[g]"), which must not be
// empty.
absl::StatusOr<std::vector<NamedGroupSpec>> NamedGroupsFromProto(
    const google::protobuf::RepeatedPtrField<v1::ZeroParamGroup>& groups);

void NamedGroupToProto(const NamedGroupSpec& group, v1::ZeroParamGroup* proto);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_NAMED_GROUPS_PROTO_H_
