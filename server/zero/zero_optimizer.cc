#include "server/zero/zero_optimizer.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cpu_backend.h"

namespace distopt {

namespace {

// 48 bits of a hash as three floats, each exactly representable, so that
// they cross an all-gather unchanged. FNV-1a, not absl::Hash: that one is
// seeded per process, and the ranks are different processes.
std::vector<float> HashAsFloats(absl::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return {static_cast<float>(hash & 0xffff),
          static_cast<float>((hash >> 16) & 0xffff),
          static_cast<float>((hash >> 32) & 0xffff)};
}

// The parts of the specification every rank must share, by name.
std::vector<std::pair<std::string, std::string>> Specification(
    const std::string& kind_name, const std::vector<ZeroParamGroup>& groups) {
  std::string hyperparameters;
  std::string shapes;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<std::pair<std::string, std::string>> sorted;
    for (const auto& [name, value] : groups[g].hyperparameters) {
      sorted.emplace_back(name, HyperValueToString(value));
    }
    std::sort(sorted.begin(), sorted.end());
    absl::StrAppend(&hyperparameters, "group ", g, ":");
    for (const auto& [name, value] : sorted) {
      absl::StrAppend(&hyperparameters, " ", name, "=", value);
    }
    absl::StrAppend(&shapes, "group ", g, ":");
    for (const Tensor* p : groups[g].params) {
      absl::StrAppend(&shapes, " ", ShapeToString(p->shape()));
    }
    absl::StrAppend(&hyperparameters, ";");
    absl::StrAppend(&shapes, ";");
  }
  return {{"optimizer kind", kind_name},
          {"hyperparameters", hyperparameters},
          {"parameter groups and shapes", shapes}};
}

// FAILED_PRECONDITION on every rank, naming the part and the ranks, when
// the ranks' specifications differ.
absl::Status CheckSameSpecification(
    Communicator& communicator,
    const std::vector<std::pair<std::string, std::string>>& parts) {
  std::vector<float> mine;
  for (const auto& part : parts) {
    for (float f : HashAsFloats(part.second)) mine.push_back(f);
  }
  std::vector<float> all(mine.size() * communicator.size());
  absl::Status status = communicator.AllGather(mine, absl::MakeSpan(all));
  if (!status.ok()) return status;
  for (size_t part = 0; part < parts.size(); ++part) {
    std::vector<int> differing;
    for (int r = 1; r < communicator.size(); ++r) {
      for (int k = 0; k < 3; ++k) {
        if (all[r * mine.size() + part * 3 + k] != all[part * 3 + k]) {
          differing.push_back(r);
          break;
        }
      }
    }
    if (!differing.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          parts[part].first, ": rank(s) ", absl::StrJoin(differing, ", "),
          " differ from rank 0 (this rank, ", communicator.rank(), ", has ",
          parts[part].second,
          "); expected the same specification on every "
          "rank"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ZeroOptimizer>> ZeroOptimizer::Create(
    Communicator* communicator, const OptimizerKind* kind,
    const std::string& kind_name, std::vector<ZeroParamGroup> groups) {
  std::vector<std::vector<int64_t>> counts;
  for (size_t g = 0; g < groups.size(); ++g) {
    counts.emplace_back();
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const Tensor& p = *groups[g].params[i];
      if (p.dtype() != DType::kFloat32 || !p.device().is_cpu()) {
        return absl::InvalidArgumentError(
            absl::StrCat("groups[", g, "].params[", i, "]: ", p.DebugString(),
                         "; expected float32 on cpu"));
      }
      counts.back().push_back(p.num_elements());
    }
  }
  absl::Status same =
      CheckSameSpecification(*communicator, Specification(kind_name, groups));
  if (!same.ok()) return same;
  absl::StatusOr<ZeroPartition> partition =
      PartitionParameters(counts, communicator->size());
  if (!partition.ok()) return partition.status();
  std::vector<std::unique_ptr<FunctionalOptimizer>> local;
  const int rank = communicator->rank();
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<ParameterLayout> layouts;
    for (int index : partition->parameters[rank][g]) {
      layouts.push_back({DType::kFloat32, groups[g].params[index]->shape()});
    }
    absl::StatusOr<std::unique_ptr<FunctionalOptimizer>> optimizer =
        FunctionalOptimizer::Create(kind, groups[g].hyperparameters, layouts);
    if (!optimizer.ok()) return optimizer.status();
    local.push_back(layouts.empty() ? nullptr : *std::move(optimizer));
  }
  return std::unique_ptr<ZeroOptimizer>(
      new ZeroOptimizer(communicator, std::move(groups), *std::move(partition),
                        std::move(local)));
}

absl::Status ZeroOptimizer::Step(
    const std::vector<std::vector<const Tensor*>>& grads) {
  if (grads.size() != groups_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grads: ", grads.size(), " groups; expected ", groups_.size()));
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (grads[g].size() != groups_[g].params.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("grads[", g, "]: ", grads[g].size(),
                       " gradients; expected ", groups_[g].params.size()));
    }
    for (size_t i = 0; i < grads[g].size(); ++i) {
      const Tensor* grad = grads[g][i];
      if (grad != nullptr && (grad->dtype() != DType::kFloat32 ||
                              grad->shape() != groups_[g].params[i]->shape())) {
        return absl::InvalidArgumentError(
            absl::StrCat("grads[", g, "][", i, "]: ", grad->DebugString(),
                         "; expected ", groups_[g].params[i]->DebugString()));
      }
    }
  }
  // 1. Average every gradient across ranks, in two collectives whatever
  // the model's size. Which parameters have a gradient may differ between
  // ranks, so the ranks first agree on it: a parameter with a gradient on
  // any rank is averaged with zeros for the ranks without one (as DDP
  // does); one with none anywhere is skipped everywhere. Every rank thus
  // issues the same collectives.
  std::vector<float> present;
  for (const auto& group : grads) {
    for (const Tensor* grad : group) present.push_back(grad != nullptr);
  }
  absl::Status status =
      communicator_->AllReduce(absl::MakeSpan(present), ReduceOp::kSum);
  if (!status.ok()) return status;
  int64_t flat_size = 0;
  size_t k = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < grads[g].size(); ++i, ++k) {
      if (present[k] > 0) flat_size += groups_[g].params[i]->num_elements();
    }
  }
  std::vector<float> flat(flat_size, 0.0f);
  int64_t offset = 0;
  k = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < grads[g].size(); ++i, ++k) {
      if (present[k] == 0) continue;
      const Tensor* grad = grads[g][i];
      if (grad != nullptr && grad->device().is_cpu()) {
        absl::c_copy(grad->host_span<float>(), flat.begin() + offset);
      } else if (grad != nullptr) {
        absl::StatusOr<Tensor> host = grad->CloneTo(CpuBackend());
        if (!host.ok()) return host.status();
        absl::c_copy(host->host_span<float>(), flat.begin() + offset);
      }
      offset += groups_[g].params[i]->num_elements();
    }
  }
  status = communicator_->AllReduce(absl::MakeSpan(flat), ReduceOp::kAverage);
  if (!status.ok()) return status;
  // Views of the averaged gradients in `flat`; nullopt where skipped.
  std::vector<std::vector<std::optional<Tensor>>> averaged(groups_.size());
  offset = 0;
  k = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    averaged[g].resize(grads[g].size());
    for (size_t i = 0; i < grads[g].size(); ++i, ++k) {
      if (present[k] == 0) continue;
      const Tensor& param = *groups_[g].params[i];
      averaged[g][i] = Tensor::Borrow(&flat[offset], DType::kFloat32,
                                      param.shape(), Device::Cpu());
      offset += param.num_elements();
    }
  }
  // 2. Step this rank's partition.
  const int rank = communicator_->rank();
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (local_[g] == nullptr) continue;
    std::vector<Tensor*> params;
    std::vector<const Tensor*> own_grads;
    for (int index : partition_.parameters[rank][g]) {
      params.push_back(groups_[g].params[index]);
      own_grads.push_back(averaged[g][index].has_value() ? &*averaged[g][index]
                                                         : nullptr);
    }
    status = local_[g]->Step(params, own_grads);
    if (!status.ok()) return status;
  }
  // 3. Every parameter from its owner to all ranks.
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      if (!averaged[g][i].has_value()) continue;
      status = communicator_->Broadcast(
          groups_[g].params[i]->host_span<float>(), partition_.owner[g][i]);
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

int64_t ZeroOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& optimizer : local_) {
    if (optimizer == nullptr) continue;
    for (size_t i = 0; i < optimizer->parameters().size(); ++i) {
      for (const auto& [name, buffer] : optimizer->state(i).buffers) {
        bytes += static_cast<int64_t>(buffer.byte_size());
      }
    }
  }
  return bytes;
}

}  // namespace distopt
