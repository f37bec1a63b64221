// Conversions between the optimizer types of server/optim and the messages
// of proto/distopt/v1/optimizer.proto.
#ifndef DISTOPT_SERVER_OPTIM_WIRE_OPTIMIZER_H_
#define DISTOPT_SERVER_OPTIM_WIRE_OPTIMIZER_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proto/distopt/v1/optimizer.pb.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/optimizer_kind.h"

namespace distopt {

v1::HyperparameterValue HyperValueToProto(const HyperValue& value);
// INVALID_ARGUMENT naming `field` when no value is set.
absl::StatusOr<HyperValue> HyperValueFromProto(
    const v1::HyperparameterValue& proto, absl::string_view field);

// A map of hyperparameters from a request, e.g. CreateOptimizer's.
absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>>
HyperparametersFromProto(
    const google::protobuf::Map<std::string, v1::HyperparameterValue>& proto,
    absl::string_view field);

void OptimizerKindToProto(const std::string& name, const OptimizerKind& kind,
                          v1::OptimizerKindInfo* proto);

void StateDictToProto(const OptimizerStateDict& dict,
                      v1::OptimizerStateDict* proto);
// INVALID_ARGUMENT naming the field for malformed tensors or values.
absl::StatusOr<OptimizerStateDict> StateDictFromProto(
    const v1::OptimizerStateDict& proto);

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_WIRE_OPTIMIZER_H_
