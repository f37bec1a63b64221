#include "tests/fuzz/state_dict_protos.h"

#include <utility>

#include "server/optim/wire_optimizer.h"

namespace distopt {
namespace fuzz {

v1::OptimizerStateDict CheckedStateDictProto(
    const absl::StatusOr<OptimizerStateDict>& dict, absl::string_view what) {
  CheckOk(dict.status(), what);
  v1::OptimizerStateDict proto;
  StateDictToProto(*dict, &proto);
  return proto;
}

absl::StatusOr<v1::ZeroStateDict> GetZeroStateDict(Daemon& daemon) {
  absl::StatusOr<bool> holds = daemon.zero.ConsolidateStateDict(0);
  if (!holds.ok()) return holds.status();
  absl::StatusOr<NamedStateDict> named = daemon.zero.GetStateDict();
  if (!named.ok()) return named.status();
  v1::ZeroStateDict proto;
  StateDictToProto(named->state_dict, proto.mutable_state_dict());
  proto.mutable_parameter_names()->Assign(named->parameter_names.begin(),
                                          named->parameter_names.end());
  return proto;
}

absl::StatusOr<NamedStateDict> ZeroStateDictFromProto(
    const v1::ZeroStateDict& proto) {
  absl::StatusOr<OptimizerStateDict> dict =
      StateDictFromProto(proto.state_dict());
  if (!dict.ok()) return dict.status();
  NamedStateDict result;
  result.state_dict = *std::move(dict);
  result.parameter_names.assign(proto.parameter_names().begin(),
                                proto.parameter_names().end());
  return result;
}

absl::Status LoadZeroStateDict(Daemon& daemon, const v1::ZeroStateDict& proto) {
  return daemon.zero.LoadStateDict(ZeroStateDictFromProto(proto));
}

absl::StatusOr<v1::PostLocalSgdStateDict> GetLocalSgdStateDict(Daemon& daemon) {
  auto dict = daemon.local_sgd.GetStateDict();
  if (!dict.ok()) return dict.status();
  v1::PostLocalSgdStateDict proto;
  StateDictToProto(dict->first, proto.mutable_state_dict());
  proto.set_step(dict->second);
  return proto;
}

std::optional<int64_t> LoadedStep(const v1::PostLocalSgdStateDict& proto) {
  return proto.has_step() ? std::optional<int64_t>(proto.step()) : std::nullopt;
}

absl::Status LoadLocalSgdStateDict(Daemon& daemon,
                                   const v1::PostLocalSgdStateDict& proto) {
  absl::StatusOr<OptimizerStateDict> dict =
      StateDictFromProto(proto.state_dict());
  if (!dict.ok()) return dict.status();
  return daemon.local_sgd.LoadStateDict(*dict, LoadedStep(proto)).status();
}

}  // namespace fuzz
}  // namespace distopt
