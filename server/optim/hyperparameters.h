// Hyperparameters of functional optimizers: their declared names, types and
// defaults (HyperparameterSpec), and the resolved values of one optimizer
// (Hyperparameters). Names, defaults and checks follow torch.optim.
#ifndef DISTOPT_SERVER_OPTIM_HYPERPARAMETERS_H_
#define DISTOPT_SERVER_OPTIM_HYPERPARAMETERS_H_

#include <initializer_list>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distopt {

// A number, a flag, or a pair of numbers (betas, etas, step_sizes).
using HyperValue = std::variant<double, bool, std::pair<double, double>>;

struct HyperparameterSpec {
  std::string name;
  HyperValue default_value;
  std::string help;
};

// "number", "bool" or "pair".
absl::string_view HyperTypeName(const HyperValue& value);
std::string HyperValueToString(const HyperValue& value);

// "name=value ..." sorted by name, every number exact: what ranks compare
// to agree on a group's hyperparameters.
std::string DescribeHyperparameters(
    const absl::flat_hash_map<std::string, HyperValue>& values);

// Resolved values: every declared name has a value of its declared type.
// Cheap to copy; not synchronised.
class Hyperparameters {
 public:
  Hyperparameters() = default;

  double number(absl::string_view name) const;
  bool flag(absl::string_view name) const;
  std::pair<double, double> pair(absl::string_view name) const;
  const absl::flat_hash_map<std::string, HyperValue>& values() const {
    return values_;
  }

 private:
  friend absl::StatusOr<Hyperparameters> ResolveHyperparameters(
      const std::vector<HyperparameterSpec>&,
      const absl::flat_hash_map<std::string, HyperValue>&,
      const Hyperparameters*);
  absl::flat_hash_map<std::string, HyperValue> values_;
};

// `given` on top of `base` (or the defaults when `base` is null).
// INVALID_ARGUMENT for an unknown name (listing the known ones), a value of
// the wrong type, or a NaN or infinite number.
absl::StatusOr<Hyperparameters> ResolveHyperparameters(
    const std::vector<HyperparameterSpec>& specs,
    const absl::flat_hash_map<std::string, HyperValue>& given,
    const Hyperparameters* base = nullptr);

// Range checks shared by the optimizers; the messages follow torch.optim's
// and name the hyperparameter and the allowed range.
absl::Status RequireAtLeast(const Hyperparameters& h, absl::string_view name,
                            double minimum);
// Every one of `names` >= 0.
absl::Status RequireNonNegative(const Hyperparameters& h,
                                std::initializer_list<const char*> names);
// Both numbers of the pair `name` in [0, 1), as torch checks betas.
absl::Status RequireBetas(const Hyperparameters& h, absl::string_view name);
// `value` in [low, high) (or [low, high] if closed); `name` labels it.
absl::Status RequireInRange(absl::string_view name, double value, double low,
                            double high, bool high_closed);

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_HYPERPARAMETERS_H_
