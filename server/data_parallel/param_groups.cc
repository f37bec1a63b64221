#include "server/data_parallel/param_groups.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace distopt {

absl::Status CheckFloatingParameters(const std::vector<ParamGroup>& groups,
                                     size_t first_group, const Device& device) {
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const Tensor& p = *groups[g].params[i];
      const bool floating = p.dtype() == DType::kFloat32 ||
                            p.dtype() == DType::kFloat16 ||
                            p.dtype() == DType::kBFloat16;
      const std::string field =
          absl::StrCat("groups[", first_group + g, "].params[", i, "]: ");
      if (!floating) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, p.DebugString(), "; expected float32, float16 or bfloat16"));
      }
      // The step's buckets and collectives run where the parameters live.
      if (p.device() != device) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, p.DebugString(), "; expected a parameter on ",
            device.ToString(), " (where the group's collectives run)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGradients(const std::vector<ParamGroup>& groups,
                            const GroupGradientPointers& grads) {
  if (grads.size() != groups.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grads: ", grads.size(), " groups; expected ", groups.size()));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    if (grads[g].size() != groups[g].params.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("grads[", g, "]: ", grads[g].size(),
                       " gradients; expected ", groups[g].params.size()));
    }
    for (size_t i = 0; i < grads[g].size(); ++i) {
      const Tensor* grad = grads[g][i];
      const Tensor& param = *groups[g].params[i];
      if (grad != nullptr &&
          (grad->dtype() != param.dtype() || grad->shape() != param.shape())) {
        return absl::InvalidArgumentError(
            absl::StrCat("grads[", g, "][", i, "]: ", grad->DebugString(),
                         "; expected ", param.DebugString()));
      }
    }
  }
  return absl::OkStatus();
}

SpecificationParts DescribeSpecification(const OptimizerKind& kind,
                                         const std::string& kind_name,
                                         const std::vector<ParamGroup>& groups,
                                         int first_group) {
  std::string hyperparameters;
  std::string parameters;
  for (size_t g = 0; g < groups.size(); ++g) {
    // Values the kind refuses are described as given: making the group's
    // optimizer names them afterwards, on every rank alike when they agree.
    const absl::StatusOr<Hyperparameters> resolved = ResolveHyperparameters(
        kind.hyperparameters(), groups[g].hyperparameters);
    absl::StrAppend(
        &hyperparameters, "group ", first_group + g, ": ",
        DescribeHyperparameters(resolved.ok() ? resolved->values()
                                              : groups[g].hyperparameters),
        ";");
    absl::StrAppend(&parameters, "group ", first_group + g, ":");
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const Tensor* p = groups[g].params[i];
      absl::StrAppend(&parameters, " ",
                      i < groups[g].names.size()
                          ? absl::StrCat(groups[g].names[i], ":")
                          : "",
                      DTypeName(p->dtype()), ShapeToString(p->shape()));
    }
    absl::StrAppend(&parameters, ";");
  }
  return {{"optimizer kind", kind_name},
          {"hyperparameters", hyperparameters},
          {"parameter groups, names, dtypes and shapes", parameters}};
}

std::vector<std::vector<int64_t>> GlobalPositions(
    const std::vector<ParamGroup>& groups) {
  std::vector<std::vector<int64_t>> positions;
  int64_t next = 0;
  for (const ParamGroup& group : groups) {
    positions.emplace_back();
    for (size_t i = 0; i < group.params.size(); ++i) {
      positions.back().push_back(next++);
    }
  }
  return positions;
}

absl::StatusOr<std::unique_ptr<FunctionalOptimizer>> CreateGroupOptimizer(
    const OptimizerKind* kind, const ParamGroup& group,
    const std::vector<int>& indices, size_t number, const Device& device,
    MemoryBudget* budget) {
  std::vector<ParameterLayout> layouts;
  for (int index : indices) {
    const Tensor& p = *group.params[index];
    layouts.push_back({p.dtype(), p.shape()});
  }
  absl::StatusOr<std::unique_ptr<FunctionalOptimizer>> optimizer =
      FunctionalOptimizer::Create(kind, group.hyperparameters, layouts, device,
                                  budget);
  if (!optimizer.ok()) {
    return absl::Status(optimizer.status().code(),
                        absl::StrCat("groups[", number, "].hyperparameters: ",
                                     optimizer.status().message()));
  }
  return optimizer;
}

}  // namespace distopt
