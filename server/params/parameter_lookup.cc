#include "server/params/parameter_lookup.h"

#include "absl/strings/str_cat.h"
#include "common/quoted.h"

namespace distopt {
namespace {

std::string Describe(const ParameterKey& key) {
  return key.id.has_value() ? absl::StrCat("parameter ", *key.id)
                            : absl::StrCat("parameter ", Quoted(key.name));
}

}  // namespace

absl::StatusOr<std::vector<std::shared_ptr<Parameter>>> FindDistinctParameters(
    const ParameterStore& store, const std::vector<ParameterKey>& keys,
    absl::FunctionRef<std::string(size_t)> field,
    const absl::flat_hash_set<uint64_t>& taken) {
  absl::flat_hash_set<uint64_t> seen = taken;
  std::vector<std::shared_ptr<Parameter>> parameters;
  parameters.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::StatusOr<std::shared_ptr<Parameter>> parameter = store.Find(keys[i]);
    if (!parameter.ok()) {
      return absl::NotFoundError(
          absl::StrCat(field(i), ": no ", Describe(keys[i])));
    }
    if (!seen.insert((*parameter)->id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field(i), ": ", Describe(keys[i]),
                       " is named more than once; expected each parameter "
                       "once"));
    }
    parameters.push_back(*std::move(parameter));
  }
  return parameters;
}

std::vector<ParameterKey> KeysById(const std::vector<uint64_t>& ids) {
  std::vector<ParameterKey> keys;
  keys.reserve(ids.size());
  for (uint64_t id : ids) keys.push_back(ParameterKey::ById(id));
  return keys;
}

}  // namespace distopt
