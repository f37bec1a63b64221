#include "server/localsgd/model_averager.h"

#include <algorithm>
#include <limits>

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
  // Far beyond any training run, and small enough that no step arithmetic
  // overflows.
  constexpr int64_t kLargest = int64_t{1} << 52;
  if (spec.warmup_steps > kLargest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "warmup_steps: ", spec.warmup_steps, "; expected at most ", kLargest));
  }
  for (const auto& [period, size] : spec.periods) {
    if (period > kLargest) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": period ", period, "; expected at most ", kLargest));
    }
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
  const int64_t start = std::max(from, spec_.warmup_steps);
  // Computed, not searched: periods may be huge. When the next one would
  // lie past the largest step (a period or warm-up near 2^63), there is
  // none: group size 0, at the largest step.
  constexpr Averaging kNone = {std::numeric_limits<int64_t>::max(), 0};
  int64_t step = 0;
  if (spec_.kind == AveragerSpec::Kind::kPeriodic) {
    const int64_t period = spec_.periods[0].first;
    const int64_t since = start - spec_.warmup_steps;
    if (__builtin_mul_overflow(since / period + (since % period != 0 ? 1 : 0),
                               period, &step) ||
        __builtin_add_overflow(step, spec_.warmup_steps, &step)) {
      return kNone;
    }
  } else {
    // The smallest period's multiples are the steps that average.
    const int64_t smallest = spec_.periods.front().first;
    if (__builtin_mul_overflow(
            start / smallest + (start % smallest != 0 ? 1 : 0), smallest,
            &step)) {
      return kNone;
    }
  }
  return {step, GroupSizeAt(step).value_or(0)};
}

}  // namespace distopt
