#include "server/data_parallel/named_groups.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/params/parameter_lookup.h"

namespace distopt {

std::string DescribeGroupNames(const std::vector<NamedGroupSpec>& specs) {
  std::vector<std::string> groups;
  for (const NamedGroupSpec& group : specs) {
    groups.push_back(
        absl::StrCat("[", absl::StrJoin(group.parameter_names, ", "), "]"));
  }
  return absl::StrJoin(groups, " ");
}

absl::StatusOr<ParameterGroups> FindNamedGroups(
    const ParameterStore& store, const std::vector<NamedGroupSpec>& specs,
    size_t first_group, const ParameterGroups& taken) {
  absl::flat_hash_set<uint64_t> held;
  for (const auto& parameter : Flatten(taken)) held.insert(parameter->id());
  ParameterGroups groups;
  for (size_t g = 0; g < specs.size(); ++g) {
    std::vector<ParameterKey> keys;
    for (const std::string& name : specs[g].parameter_names) {
      keys.push_back(ParameterKey::ByName(name));
    }
    absl::StatusOr<std::vector<std::shared_ptr<Parameter>>> group =
        FindDistinctParameters(
            store, keys,
            [&](size_t i) {
              return absl::StrCat("groups[", first_group + g,
                                  "].parameter_names[", i, "]");
            },
            held);
    if (!group.ok()) return group.status();
    for (const auto& parameter : *group) held.insert(parameter->id());
    groups.push_back(*std::move(group));
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

std::vector<ParamGroup> ToParamGroups(const std::vector<NamedGroupSpec>& specs,
                                      const ParameterGroups& groups) {
  std::vector<ParamGroup> param_groups(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    param_groups[g].hyperparameters = specs[g].hyperparameters;
    for (const auto& parameter : groups[g]) {
      parameter->mutex().AssertHeld();
      param_groups[g].params.push_back(&parameter->values_locked());
      param_groups[g].names.push_back(parameter->name());
    }
  }
  return param_groups;
}

void CollectGradients(const AutogradContext& context,
                      const ParameterGroups& groups, GroupGradients* out) {
  out->values.assign(groups.size(), {});
  out->pointers.assign(groups.size(), {});
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<uint64_t> ids;
    for (const auto& parameter : groups[g]) ids.push_back(parameter->id());
    out->values[g] = context.Gradients(ids);
    for (const auto& gradient : out->values[g]) {
      out->pointers[g].push_back(gradient.has_value() ? &*gradient : nullptr);
    }
  }
}

}  // namespace distopt
