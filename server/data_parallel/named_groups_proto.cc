#include "server/data_parallel/named_groups_proto.h"

#include "absl/strings/str_cat.h"
#include "server/optim/wire_optimizer.h"

namespace distopt {

absl::StatusOr<NamedGroupSpec> NamedGroupFromProto(
    const v1::ZeroParamGroup& proto, const std::string& field) {
  NamedGroupSpec group;
  absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> values =
      HyperparametersFromProto(proto.hyperparameters(),
                               absl::StrCat(field, ".hyperparameters"));
  if (!values.ok()) return values.status();
  group.hyperparameters = *std::move(values);
  group.parameter_names.assign(proto.parameter_names().begin(),
                               proto.parameter_names().end());
  if (group.parameter_names.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".parameter_names: empty; expected at least one parameter"));
  }
  return group;
}

absl::StatusOr<std::vector<NamedGroupSpec>> NamedGroupsFromProto(
    const google::protobuf::RepeatedPtrField<v1::ZeroParamGroup>& groups) {
  if (groups.empty()) {
    return absl::InvalidArgumentError(
        "groups: empty; expected at least one parameter group");
  }
  std::vector<NamedGroupSpec> specs;
  for (int g = 0; g < groups.size(); ++g) {
    absl::StatusOr<NamedGroupSpec> group =
        NamedGroupFromProto(groups[g], absl::StrCat("groups[", g, "]"));
    if (!group.ok()) return group.status();
    specs.push_back(*std::move(group));
  }
  return specs;
}

void NamedGroupToProto(const NamedGroupSpec& group, v1::ZeroParamGroup* proto) {
  for (const auto& [name, value] : group.hyperparameters) {
    (*proto->mutable_hyperparameters())[name] = HyperValueToProto(value);
  }
  for (const std::string& name : group.parameter_names) {
    proto->add_parameter_names(name);
  }
}

}  // namespace distopt
