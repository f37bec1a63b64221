// Finding the parameters one request names, each once. A forward, an
// optimizer and a data-parallel group all name several parameters in one
// call; a parameter named twice would be locked twice (a deadlock) or
// stepped twice, so the lookup refuses it.
#ifndef DISTOPT_SERVER_PARAMS_PARAMETER_LOOKUP_H_
#define DISTOPT_SERVER_PARAMS_PARAMETER_LOOKUP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "server/params/parameter_store.h"

namespace distopt {

// The parameters `keys` name, in order. `field(i)` names key i in messages
// ("parameter_ids[3]"). NOT_FOUND for an unknown parameter; INVALID_ARGUMENT
// for one named twice, or whose id is in `taken` (parameters the caller
// already holds).
absl::StatusOr<std::vector<std::shared_ptr<Parameter>>> FindDistinctParameters(
    const ParameterStore& store, const std::vector<ParameterKey>& keys,
    absl::FunctionRef<std::string(size_t)> field,
    const absl::flat_hash_set<uint64_t>& taken = {});

// Keys for parameter ids, as requests carry them.
std::vector<ParameterKey> KeysById(const std::vector<uint64_t>& ids);

}  // namespace distopt

#endif  // DISTOPT_SERVER_PARAMS_PARAMETER_LOOKUP_H_
