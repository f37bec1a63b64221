// The step rules of torch's model averagers, without the communication:
// which steps average, and within groups of how many ranks.
//
// PeriodicModelAverager(period, warmup_steps): a call at `step` averages
// over the whole group when step >= warmup_steps and
// (step - warmup_steps) % period == 0.
// HierarchicalModelAverager(period -> group size, warmup_steps): when step >=
// warmup_steps, the largest period that divides `step` (the absolute step)
// picks the group size; none dividing it means no averaging.
// Either way `step` then advances by one.
#ifndef DISTOPT_SERVER_LOCALSGD_MODEL_AVERAGER_H_
#define DISTOPT_SERVER_LOCALSGD_MODEL_AVERAGER_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace distopt {

struct AveragerSpec {
  enum class Kind { kPeriodic, kHierarchical };
  Kind kind = Kind::kPeriodic;
  // Periodic: one entry, {period, any group size: the world size is used}.
  // Hierarchical: period -> group size, in any order.
  std::vector<std::pair<int64_t, int>> periods;
  int64_t warmup_steps = 0;
};

// A scheduled averaging: at `step`, within groups of `group_size` ranks.
struct Averaging {
  int64_t step = 0;
  int group_size = 0;
};

class ModelAverager {
 public:
  // INVALID_ARGUMENT, as torch raises ValueError, for a period below 1, a
  // negative warm-up, an empty map, a group size that does not divide the
  // world size, or (hierarchical) a group size for the largest period that
  // is not the world size. `warnings` gets torch's warnings (period 1).
  static absl::StatusOr<ModelAverager> Create(
      const AveragerSpec& spec, int world_size,
      std::vector<std::string>* warnings);

  // The group size at `step`, or nullopt when that step does not average.
  std::optional<int> GroupSizeAt(int64_t step) const;
  // The first averaging at or after `from`.
  Averaging NextAveraging(int64_t from) const;

  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  // At the largest step (a loaded one) it stays there.
  void Advance() {
    if (step_ < std::numeric_limits<int64_t>::max()) ++step_;
  }
  const AveragerSpec& spec() const { return spec_; }

 private:
  explicit ModelAverager(AveragerSpec spec) : spec_(std::move(spec)) {}

  AveragerSpec spec_;  // Periods ascending.
  int64_t step_ = 0;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_LOCALSGD_MODEL_AVERAGER_H_
