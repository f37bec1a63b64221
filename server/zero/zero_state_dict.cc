// ZeroOptimizer's state dicts: consolidation of the shards on one rank, and
// loading an unsharded dict, from any world size, on every rank.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cpu_backend.h"
#include "server/optim/state_dict_split.h"
#include "server/optim/wire_optimizer.h"
#include "server/zero/zero_optimizer.h"

namespace distopt {

absl::StatusOr<OptimizerStateDict> ZeroOptimizer::ShardStateDict() const {
  return MergeStateDicts(OptimizersOf(steppers_), kind_name_, HeldPositions(),
                         GlobalPositions(groups_));
}

absl::StatusOr<std::optional<OptimizerStateDict>>
ZeroOptimizer::ConsolidateStateDict(int to) {
  const int size = communicator_->size();
  const int rank = communicator_->rank();
  if (to < 0 || to >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("to: ", to, "; expected a rank from 0 to ", size - 1));
  }
  // This rank's shard: the state of its parameters, at global positions.
  absl::StatusOr<OptimizerStateDict> shard = ShardStateDict();
  if (!shard.ok()) return shard.status();
  v1::OptimizerStateDict proto;
  StateDictToProto(*shard, &proto);
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) {
    return absl::ResourceExhaustedError(
        "state_dict: this rank's shard is too large for one message (2 GiB)");
  }
  // Shards differ in size; gloo's gather wants one size, so each is padded
  // to the largest.
  std::vector<float> sizes(4 * size);
  absl::Status status = communicator_->AllGather(EncodeAsFloats(bytes.size()),
                                                 absl::MakeSpan(sizes));
  if (!status.ok()) return status;
  size_t largest = 0;
  for (int r = 0; r < size; ++r) {
    largest = std::max<size_t>(largest, DecodeFromFloats(&sizes[4 * r]));
  }
  bytes.resize(largest);
  std::string gathered(rank == to ? largest * size : 0, '\0');
  status = communicator_->GatherBytes(bytes, absl::MakeSpan(gathered), to);
  if (!status.ok()) return status;
  if (rank != to) return std::nullopt;
  // The param groups as this rank knows them (hyperparameters are the same
  // everywhere), with every rank's state.
  OptimizerStateDict whole;
  whole.kind = kind_name_;
  whole.param_groups = std::move(shard->param_groups);
  for (int r = 0; r < size; ++r) {
    v1::OptimizerStateDict part;
    if (!part.ParseFromArray(gathered.data() + r * largest,
                             DecodeFromFloats(&sizes[4 * r]))) {
      return absl::DataLossError(
          absl::StrCat("state_dict: rank ", r, "'s shard did not parse"));
    }
    absl::StatusOr<OptimizerStateDict> parsed = StateDictFromProto(part);
    if (!parsed.ok()) return parsed.status();
    for (auto& [position, entry] : parsed->state) {
      whole.state[position] = std::move(entry);
    }
  }
  return whole;
}

namespace {

// A digest of a tensor's bytes (a tensor on a GPU is read through a host
// copy: these are compared only at a load, which is rare).
std::string FingerprintOf(const Tensor& tensor) {
  absl::StatusOr<Tensor> host = tensor.device().is_cpu()
                                    ? absl::StatusOr<Tensor>(tensor)
                                    : tensor.CloneTo(CpuBackend());
  if (!host.ok())
    return absl::StrCat("unreadable (", host.status().message(), ")");
  return absl::StrCat(Fingerprint(absl::string_view(
      static_cast<const char*>(host->data()), host->byte_size())));
}

// What every rank must load alike: each rank keeps its own share of the
// dict it was given, so two different dicts would leave the ranks stepping
// with different hyperparameters and steps, and no rank could tell.
SpecificationParts DescribeStateDict(const OptimizerStateDict& dict) {
  std::string groups;
  for (size_t g = 0; g < dict.param_groups.size(); ++g) {
    absl::StrAppend(
        &groups, "group ", g, ": ",
        DescribeHyperparameters(dict.param_groups[g].hyperparameters),
        " params [", absl::StrJoin(dict.param_groups[g].params, ","), "];");
  }
  std::string state;
  for (const auto& [position, entry] : dict.state) {
    absl::StrAppend(
        &state, position,
        " step=", entry.step.has_value() ? absl::StrCat(*entry.step) : "none");
    for (const auto& [name, buffer] : entry.buffers) {
      absl::StrAppend(&state, " ", name, "=", FingerprintOf(buffer));
    }
    absl::StrAppend(&state, ";");
  }
  return {{"the state_dict's kind and parameter groups",
           absl::StrCat(dict.kind, " ", groups)},
          {"the state_dict's steps and state",
           absl::StrCat("fingerprint ", Fingerprint(state))}};
}

}  // namespace

absl::Status ZeroOptimizer::LoadStateDict(
    const absl::StatusOr<OptimizerStateDict>& dict, Given given) {
  const std::vector<FunctionalOptimizer*> optimizers = OptimizersOf(steppers_);
  std::vector<OptimizerStateDict> backups;
  // Loads this rank's share, all or nothing.
  auto load_share = [&]() -> absl::Status {
    if (!dict.ok()) return dict.status();
    absl::Status fits = CheckStateFitsParameters(*dict);
    if (!fits.ok()) return fits;
    absl::StatusOr<std::vector<OptimizerStateDict>> shares =
        SplitStateDict(*dict, HeldPositions(), GlobalPositions(groups_));
    if (!shares.ok()) return shares.status();
    absl::StatusOr<std::vector<OptimizerStateDict>> old = LoadAllOrNothing(
        optimizers, kind_name_, *shares,
        absl::StrCat("(this rank's share, rank ", communicator_->rank(), ")"));
    if (!old.ok()) return old.status();
    backups = *std::move(old);
    return absl::OkStatus();
  };
  // ZeRO's ranks hold the same model: a dict loaded over parameters that
  // differ (a step torn half-way, not repaired) would train them apart.
  absl::Status same = CheckSameOnEveryRank(*communicator_, DescribeValues());
  if (!same.ok()) return same;
  absl::Status status =
      AgreeOnEveryRank(*communicator_, load_share(), "state_dict");
  if (status.ok() && given == Given::kTheSameOnEveryRank) {
    status = CheckSameOnEveryRank(*communicator_, DescribeStateDict(*dict));
  }
  if (!status.ok() && !backups.empty()) {
    // Another rank refused it: this one goes back to its old state.
    LoadAllOrNothing(optimizers, kind_name_, backups, "").IgnoreError();
  }
  if (status.ok()) damage_ = absl::OkStatus();
  return status;
}

SpecificationParts ZeroOptimizer::DescribeValues() const {
  SpecificationParts parts;
  const std::vector<std::vector<int64_t>> positions = GlobalPositions(groups_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      parts.emplace_back(
          absl::StrCat("the values of parameter ", positions[g][i], " (group ",
                       g, ", index ", i, ")"),
          FingerprintOf(*groups_[g].params[i]));
    }
  }
  return parts;
}

// Checked on every rank, not only by each entry's owner, so that all ranks
// refuse a dict that does not fit the model.
absl::Status ZeroOptimizer::CheckStateFitsParameters(
    const OptimizerStateDict& dict) const {
  std::vector<const Tensor*> by_position;
  for (const ParamGroup& group : groups_) {
    for (const Tensor* p : group.params) by_position.push_back(p);
  }
  for (const auto& [position, entry] : dict.state) {
    const std::string field = absl::StrCat("state_dict.state[", position, "]");
    if (position < 0 || position >= static_cast<int64_t>(by_position.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": no such parameter; expected 0 to ",
                       by_position.size() - 1));
    }
    const Tensor& param = *by_position[position];
    for (const auto& [name, buffer] : entry.buffers) {
      if (buffer.dtype() != DType::kFloat32 ||
          buffer.shape() != param.shape()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".", name, ": ", buffer.DebugString(),
                         "; expected float32", ShapeToString(param.shape())));
      }
    }
  }
  return absl::OkStatus();
}

std::vector<std::vector<int64_t>> ZeroOptimizer::HeldPositions() const {
  const std::vector<std::vector<int64_t>> positions = GlobalPositions(groups_);
  std::vector<std::vector<int64_t>> held(groups_.size());
  const int rank = communicator_->rank();
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (int index : partition_.parameters[rank][g]) {
      held[g].push_back(positions[g][index]);
    }
  }
  return held;
}

}  // namespace distopt
