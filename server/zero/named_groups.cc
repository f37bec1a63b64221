#include "server/zero/named_groups.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace distopt {

absl::StatusOr<GroupMembership*> RankResources::Group() const {
  GroupMembership* group = membership->load();
  if (group == nullptr) {
    return absl::FailedPreconditionError(
        "group: this daemon is not in a data-parallel group; expected "
        "--world_size > 1 with --rendezvous or --peers");
  }
  return group;
}

absl::StatusOr<std::shared_ptr<AutogradContext>> RankResources::Context(
    uint64_t context_id) const {
  absl::Status valid = ValidateContextId(context_id, "context_id");
  if (!valid.ok()) return valid;
  return contexts->Find(context_id);
}

absl::StatusOr<ParameterGroups> FindNamedGroups(
    ParameterStore& store, const std::vector<NamedGroupSpec>& specs,
    size_t first_group, const ParameterGroups& taken) {
  absl::flat_hash_set<uint64_t> seen;
  for (const auto& parameter : Flatten(taken)) seen.insert(parameter->id());
  ParameterGroups groups;
  for (size_t g = 0; g < specs.size(); ++g) {
    const NamedGroupSpec& spec = specs[g];
    groups.emplace_back();
    for (size_t i = 0; i < spec.parameter_names.size(); ++i) {
      const std::string field = absl::StrCat("groups[", first_group + g,
                                             "].parameter_names[", i, "]");
      absl::StatusOr<std::shared_ptr<Parameter>> parameter =
          store.Find(ParameterKey::ByName(spec.parameter_names[i]));
      if (!parameter.ok()) {
        return absl::NotFoundError(absl::StrCat(
            field, ": no parameter named \"", spec.parameter_names[i], "\""));
      }
      // A parameter named twice would be locked twice.
      if (!seen.insert((*parameter)->id()).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": \"", spec.parameter_names[i],
                         "\" is named more than once; expected each "
                         "parameter in one group, once"));
      }
      groups.back().push_back(*std::move(parameter));
    }
  }
  return groups;
}

std::vector<std::shared_ptr<Parameter>> Flatten(const ParameterGroups& groups) {
  std::vector<std::shared_ptr<Parameter>> all;
  for (const auto& group : groups) {
    all.insert(all.end(), group.begin(), group.end());
  }
  return all;
}

ZeroParamGroup ToTensorGroup(
    const NamedGroupSpec& spec,
    const std::vector<std::shared_ptr<Parameter>>& parameters) {
  ZeroParamGroup group;
  group.hyperparameters = spec.hyperparameters;
  for (const auto& parameter : parameters) {
    parameter->mutex().AssertHeld();
    group.params.push_back(&parameter->values_locked());
  }
  return group;
}

void BumpVersions(const std::vector<std::shared_ptr<Parameter>>& parameters) {
  for (const auto& parameter : parameters) {
    parameter->mutex().AssertHeld();
    parameter->BumpVersionLocked();
  }
}

void CollectGradients(const AutogradContext& context,
                      const ParameterGroups& groups, GroupGradients* out) {
  out->values.assign(groups.size(), {});
  out->pointers.assign(groups.size(), {});
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& parameter : groups[g]) {
      out->values[g].push_back(context.Gradient(parameter->id()));
    }
    for (const auto& gradient : out->values[g]) {
      out->pointers[g].push_back(gradient.has_value() ? &*gradient : nullptr);
    }
  }
}

}  // namespace distopt
