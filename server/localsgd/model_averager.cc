#include "server/localsgd/model_averager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace distopt {

absl::StatusOr<ModelAverager> ModelAverager::Create(
    const AveragerSpec& spec, int world_size,
    std::vector<std::string>* warnings) {
  const bool periodic = spec.kind == AveragerSpec::Kind::kPeriodic;
  const std::string field = periodic ? "period" : "period_group_sizes";
  if (spec.periods.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": empty; expected at least one period"));
  }
  if (periodic && spec.periods.size() != 1) {
    return absl::InvalidArgumentError(
        "period: several periods; expected one (or a hierarchical averager)");
  }
  if (spec.warmup_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "warmup_steps: ", spec.warmup_steps, "; expected a number >= 0"));
  }
  AveragerSpec sorted = spec;
  // A periodic averager always averages the whole group.
  if (periodic) sorted.periods[0].second = world_size;
  std::sort(sorted.periods.begin(), sorted.periods.end());
  for (size_t i = 0; i < sorted.periods.size(); ++i) {
    const auto [period, group_size] = sorted.periods[i];
    if (period < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": period ", period, "; expected >= 1"));
    }
    if (i > 0 && period == sorted.periods[i - 1].first) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": period ", period, " given twice"));
    }
    if (group_size < 1 || world_size % group_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": group size ", group_size, " for period ", period,
          "; expected a divisor of the world size ", world_size));
    }
  }
  if (sorted.periods.back().second != world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": group size ", sorted.periods.back().second,
                     " for the largest period ", sorted.periods.back().first,
                     "; expected the world size ", world_size));
  }
  if (sorted.periods.back().first == 1) {
    warnings->push_back(
        "averaging every step costs no less than all-reducing the gradients; "
        "with a period of 1, plain data parallelism is the better choice");
  }
  return ModelAverager(std::move(sorted));
}

std::optional<int> ModelAverager::GroupSizeAt(int64_t step) const {
  if (step < spec_.warmup_steps) return std::nullopt;
  if (spec_.kind == AveragerSpec::Kind::kPeriodic) {
    const auto [period, group_size] = spec_.periods[0];
    if ((step - spec_.warmup_steps) % period != 0) return std::nullopt;
    return group_size;
  }
  for (auto it = spec_.periods.rbegin(); it != spec_.periods.rend(); ++it) {
    if (step % it->first == 0) return it->second;
  }
  return std::nullopt;
}

Averaging ModelAverager::NextAveraging(int64_t from) const {
  int64_t step = std::max(from, spec_.warmup_steps);
  // Within one smallest period there is always one.
  const int64_t smallest = spec_.periods.front().first;
  for (int64_t k = 0; k <= smallest; ++k, ++step) {
    std::optional<int> group_size = GroupSizeAt(step);
    if (group_size.has_value()) return {step, *group_size};
  }
  return {-1, 0};
}

}  // namespace distopt
