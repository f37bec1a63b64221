// ZeroOptimizer's state dicts: consolidation of the shards on one rank, and
// loading an unsharded dict, from any world size, on every rank.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/optim/state_dict_proto.h"
#include "server/zero/zero_optimizer.h"

namespace distopt {

absl::StatusOr<std::optional<OptimizerStateDict>>
ZeroOptimizer::ConsolidateStateDict(int to) {
  const int size = communicator_->size();
  const int rank = communicator_->rank();
  if (to < 0 || to >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("to: ", to, "; expected a rank from 0 to ", size - 1));
  }
  // This rank's shard: the state of its parameters, at global positions.
  OptimizerStateDict shard;
  shard.kind = kind_name_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    absl::StatusOr<OptimizerStateDict> local = local_[g]->StateDict(kind_name_);
    if (!local.ok()) return local.status();
    const std::vector<int>& mine = partition_.parameters[rank][g];
    for (auto& [index, entry] : local->state) {
      shard.state[GlobalPosition(g, mine[index])] = std::move(entry);
    }
    OptimizerStateDict::ParamGroup group = local->param_groups[0];
    group.params.clear();
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      group.params.push_back(GlobalPosition(g, i));
    }
    shard.param_groups.push_back(std::move(group));
  }
  v1::OptimizerStateDict proto;
  StateDictToProto(shard, &proto);
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
  whole.param_groups = std::move(shard.param_groups);
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

absl::Status ZeroOptimizer::LoadStateDict(
    const absl::StatusOr<OptimizerStateDict>& given) {
  const int rank = communicator_->rank();
  std::vector<OptimizerStateDict> backups;
  size_t loaded = 0;
  // Loads this rank's share; stops at the first refusal.
  auto load_share = [&]() -> absl::Status {
    if (!given.ok()) return given.status();
    const OptimizerStateDict& dict = *given;
    if (dict.param_groups.size() != groups_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("state_dict.param_groups: ", dict.param_groups.size(),
                       " groups; expected ", groups_.size()));
    }
    int64_t positions = 0;
    for (size_t g = 0; g < groups_.size(); ++g) {
      std::vector<int64_t> listed = dict.param_groups[g].params;
      std::sort(listed.begin(), listed.end());
      std::vector<int64_t> expected;
      for (size_t i = 0; i < groups_[g].params.size(); ++i) {
        expected.push_back(GlobalPosition(g, i));
      }
      if (listed != expected) {
        return absl::InvalidArgumentError(absl::StrCat(
            "state_dict.param_groups[", g, "].params: [",
            absl::StrJoin(dict.param_groups[g].params, ", "), "]; expected [",
            absl::StrJoin(expected, ", "), "] in some order"));
      }
      positions += expected.size();
    }
    // Every entry is checked on every rank, not only by its owner, so that
    // all ranks refuse a dict that does not fit the model.
    std::vector<const Tensor*> by_position;
    for (const ZeroParamGroup& group : groups_) {
      for (const Tensor* p : group.params) by_position.push_back(p);
    }
    for (const auto& [position, entry] : dict.state) {
      const std::string field =
          absl::StrCat("state_dict.state[", position, "]");
      if (position < 0 || position >= positions) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ": no such parameter; expected 0 to ", positions - 1));
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
    for (size_t g = 0; g < groups_.size(); ++g) {
      absl::StatusOr<OptimizerStateDict> backup =
          local_[g]->StateDict(kind_name_);
      if (!backup.ok()) return backup.status();
      backups.push_back(*std::move(backup));
    }
    for (size_t g = 0; g < groups_.size(); ++g) {
      const std::vector<int>& mine = partition_.parameters[rank][g];
      OptimizerStateDict share;
      share.kind = dict.kind;
      OptimizerStateDict::ParamGroup group;
      group.hyperparameters = dict.param_groups[g].hyperparameters;
      std::vector<std::string> mapping;
      for (size_t j = 0; j < mine.size(); ++j) {
        group.params.push_back(j);
        const int64_t position = GlobalPosition(g, mine[j]);
        mapping.push_back(absl::StrCat(j, "=", position));
        auto it = dict.state.find(position);
        if (it != dict.state.end()) share.state[j] = it->second;
      }
      share.param_groups.push_back(std::move(group));
      absl::Status status = local_[g]->LoadStateDict(kind_name_, share);
      if (!status.ok()) {
        return absl::Status(
            status.code(),
            absl::StrCat("state_dict.param_groups[", g, "] on rank ", rank,
                         " (local position=global position: ",
                         absl::StrJoin(mapping, " "), "): ", status.message()));
      }
      ++loaded;
    }
    return absl::OkStatus();
  };
  absl::Status status = AgreeOnEveryRank(load_share(), "state_dict");
  if (!status.ok()) {
    for (size_t g = 0; g < loaded; ++g) {
      // The backup was this optimizer's own state, so it always fits.
      local_[g]->LoadStateDict(kind_name_, backups[g]).IgnoreError();
    }
    return status;
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].hyperparameters = given->param_groups[g].hyperparameters;
  }
  return absl::OkStatus();
}

}  // namespace distopt
