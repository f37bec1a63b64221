#include "server/optim/hyperparameters.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/quoted.h"

namespace distopt {

absl::string_view HyperTypeName(const HyperValue& value) {
  if (std::holds_alternative<double>(value)) return "number";
  if (std::holds_alternative<bool>(value)) return "bool";
  return "pair";
}

namespace {

// The shortest decimal that reads back as the same double (absl::StrCat
// keeps 6 digits): ranks compare these texts, so values that differ at
// all must differ in them (lr 0.1 against 0.1000001).
std::string ExactNumber(double number) {
  for (int digits = 6; digits < 17; ++digits) {
    const std::string text = absl::StrFormat("%.*g", digits, number);
    double back = 0;
    if (absl::SimpleAtod(text, &back) && back == number) return text;
  }
  return absl::StrFormat("%.17g", number);
}

}  // namespace

std::string HyperValueToString(const HyperValue& value) {
  if (const double* number = std::get_if<double>(&value)) {
    return ExactNumber(*number);
  }
  if (const bool* flag = std::get_if<bool>(&value)) {
    return *flag ? "true" : "false";
  }
  const auto& pair = std::get<std::pair<double, double>>(value);
  return absl::StrCat("(", ExactNumber(pair.first), ", ",
                      ExactNumber(pair.second), ")");
}

std::string DescribeHyperparameters(
    const absl::flat_hash_map<std::string, HyperValue>& values) {
  std::vector<std::string> sorted;
  for (const auto& [name, value] : values) {
    sorted.push_back(absl::StrCat(name, "=", HyperValueToString(value)));
  }
  std::sort(sorted.begin(), sorted.end());
  return absl::StrJoin(sorted, " ");
}

double Hyperparameters::number(absl::string_view name) const {
  return std::get<double>(values_.at(name));
}

bool Hyperparameters::flag(absl::string_view name) const {
  return std::get<bool>(values_.at(name));
}

std::pair<double, double> Hyperparameters::pair(absl::string_view name) const {
  return std::get<std::pair<double, double>>(values_.at(name));
}

absl::StatusOr<Hyperparameters> ResolveHyperparameters(
    const std::vector<HyperparameterSpec>& specs,
    const absl::flat_hash_map<std::string, HyperValue>& given,
    const Hyperparameters* base) {
  Hyperparameters resolved;
  std::vector<std::string> known;
  for (const HyperparameterSpec& spec : specs) {
    resolved.values_[spec.name] =
        base != nullptr ? base->values().at(spec.name) : spec.default_value;
    known.push_back(spec.name);
  }
  for (const auto& [name, value] : given) {
    auto it = resolved.values_.find(name);
    if (it == resolved.values_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hyperparameters[", Quoted(name),
                       "]: unknown hyperparameter; expected one of ",
                       absl::StrJoin(known, ", ")));
    }
    if (value.index() != it->second.index()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hyperparameters.", name, ": a ", HyperTypeName(value),
                       "; expected a ", HyperTypeName(it->second)));
    }
    std::vector<double> numbers;
    if (const double* number = std::get_if<double>(&value)) {
      numbers.push_back(*number);
    } else if (const auto* pair =
                   std::get_if<std::pair<double, double>>(&value)) {
      numbers = {pair->first, pair->second};
    }
    for (double number : numbers) {
      if (!std::isfinite(number)) {
        return absl::InvalidArgumentError(
            absl::StrCat("hyperparameters.", name, ": ", number,
                         " is not finite; expected a finite number"));
      }
    }
    it->second = value;
  }
  return resolved;
}

absl::Status RequireAtLeast(const Hyperparameters& h, absl::string_view name,
                            double minimum) {
  const double value = h.number(name);
  if (value >= minimum) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("hyperparameters.", name, ": invalid value ", value,
                   "; expected ", name, " >= ", minimum));
}

absl::Status RequireNonNegative(const Hyperparameters& h,
                                std::initializer_list<const char*> names) {
  for (const char* name : names) {
    absl::Status status = RequireAtLeast(h, name, 0.0);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status RequireBetas(const Hyperparameters& h, absl::string_view name) {
  const auto [first, second] = h.pair(name);
  absl::Status status =
      RequireInRange(absl::StrCat(name, "[0]"), first, 0.0, 1.0, false);
  if (status.ok()) {
    status = RequireInRange(absl::StrCat(name, "[1]"), second, 0.0, 1.0, false);
  }
  return status;
}

absl::Status RequireInRange(absl::string_view name, double value, double low,
                            double high, bool high_closed) {
  if (value >= low && (high_closed ? value <= high : value < high)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "hyperparameters.", name, ": invalid value ", value, "; expected ", low,
      " <= ", name, high_closed ? " <= " : " < ", high));
}

}  // namespace distopt
