#include "server/optim/wire_optimizer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/wire_tensor.h"

namespace distopt {

v1::HyperparameterValue HyperValueToProto(const HyperValue& value) {
  v1::HyperparameterValue proto;
  if (const double* number = std::get_if<double>(&value)) {
    proto.set_number(*number);
  } else if (const bool* flag = std::get_if<bool>(&value)) {
    proto.set_flag(*flag);
  } else {
    const auto& pair = std::get<std::pair<double, double>>(value);
    proto.mutable_pair()->set_first(pair.first);
    proto.mutable_pair()->set_second(pair.second);
  }
  return proto;
}

absl::StatusOr<HyperValue> HyperValueFromProto(
    const v1::HyperparameterValue& proto, absl::string_view field) {
  switch (proto.value_case()) {
    case v1::HyperparameterValue::kNumber:
      return HyperValue(proto.number());
    case v1::HyperparameterValue::kFlag:
      return HyperValue(proto.flag());
    case v1::HyperparameterValue::kPair:
      return HyperValue(
          std::make_pair(proto.pair().first(), proto.pair().second()));
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": no value; expected a number, a flag or a pair"));
  }
}

absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>>
HyperparametersFromProto(
    const google::protobuf::Map<std::string, v1::HyperparameterValue>& proto,
    absl::string_view field) {
  absl::flat_hash_map<std::string, HyperValue> values;
  for (const auto& [name, value] : proto) {
    absl::StatusOr<HyperValue> converted =
        HyperValueFromProto(value, absl::StrCat(field, ".", name));
    if (!converted.ok()) return converted.status();
    values[name] = *converted;
  }
  return values;
}

void OptimizerKindToProto(const std::string& name, const OptimizerKind& kind,
                          v1::OptimizerKindInfo* proto) {
  proto->set_name(name);
  for (const HyperparameterSpec& spec : kind.hyperparameters()) {
    v1::HyperparameterInfo* info = proto->add_hyperparameters();
    info->set_name(spec.name);
    *info->mutable_default_value() = HyperValueToProto(spec.default_value);
    info->set_help(spec.help);
  }
  absl::StatusOr<Hyperparameters> defaults =
      ResolveHyperparameters(kind.hyperparameters(), {});
  if (defaults.ok()) {
    for (const StateBufferSpec& buffer : kind.StateBuffers(*defaults)) {
      proto->add_state_buffers(buffer.name);
    }
  }
  proto->set_has_step_state(kind.has_step_state());
}

void StateDictToProto(const OptimizerStateDict& dict,
                      v1::OptimizerStateDict* proto) {
  proto->set_kind(dict.kind);
  for (const auto& group : dict.param_groups) {
    v1::ParamGroup* out = proto->add_param_groups();
    for (const auto& [name, value] : group.hyperparameters) {
      (*out->mutable_hyperparameters())[name] = HyperValueToProto(value);
    }
    out->mutable_params()->Assign(group.params.begin(), group.params.end());
  }
  for (const auto& [index, entry] : dict.state) {
    v1::ParameterState* out = proto->add_state();
    out->set_index(index);
    if (entry.step.has_value()) out->set_step(*entry.step);
    for (const auto& [name, tensor] : entry.buffers) {
      TensorToProto(tensor, &(*out->mutable_buffers())[name]);
    }
  }
}

absl::StatusOr<OptimizerStateDict> StateDictFromProto(
    const v1::OptimizerStateDict& proto) {
  OptimizerStateDict dict;
  dict.kind = proto.kind();
  for (int g = 0; g < proto.param_groups_size(); ++g) {
    const v1::ParamGroup& group = proto.param_groups(g);
    OptimizerStateDict::ParamGroup out;
    absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> values =
        HyperparametersFromProto(
            group.hyperparameters(),
            absl::StrCat("state_dict.param_groups[", g, "].hyperparameters"));
    if (!values.ok()) return values.status();
    out.hyperparameters = *std::move(values);
    out.params.assign(group.params().begin(), group.params().end());
    dict.param_groups.push_back(std::move(out));
  }
  for (const v1::ParameterState& state : proto.state()) {
    const std::string field =
        absl::StrCat("state_dict.state[", state.index(), "]");
    if (dict.state.count(state.index()) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": given twice; expected each index once"));
    }
    OptimizerStateDict::Entry entry;
    if (state.has_step()) entry.step = state.step();
    // Map order is unspecified on the wire: keep the names sorted.
    std::vector<std::string> names;
    for (const auto& buffer : state.buffers()) names.push_back(buffer.first);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      absl::StatusOr<Tensor> tensor = TensorFromProto(
          state.buffers().at(name), absl::StrCat(field, ".", name));
      if (!tensor.ok()) return tensor.status();
      entry.buffers.emplace_back(name, *std::move(tensor));
    }
    dict.state[state.index()] = std::move(entry);
  }
  return dict;
}

}  // namespace distopt
