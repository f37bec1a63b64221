#include "server/params/parameter_update.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace distopt {

ParameterUpdate::ParameterUpdate(
    std::vector<std::shared_ptr<Parameter>> parameters)
    : parameters_(std::move(parameters)), locks_(parameters_) {}

absl::Status ParameterUpdate::CheckNoneDeleted() const {
  for (const auto& parameter : parameters_) {
    parameter->mutex().AssertHeld();
    if (parameter->deleted_locked()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter ", parameter->id(), " (\"", parameter->name(),
          "\") was deleted; expected the optimizer's parameters to exist"));
    }
  }
  return absl::OkStatus();
}

std::vector<Tensor*> ParameterUpdate::values() const {
  std::vector<Tensor*> values;
  values.reserve(parameters_.size());
  for (const auto& parameter : parameters_) {
    parameter->mutex().AssertHeld();
    values.push_back(&parameter->values_locked());
  }
  return values;
}

void ParameterUpdate::Commit(absl::FunctionRef<bool(size_t index)> changed) {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!changed(i)) continue;
    parameters_[i]->mutex().AssertHeld();
    parameters_[i]->BumpVersionLocked();
  }
}

void ParameterUpdate::CommitAll() {
  Commit([](size_t) { return true; });
}

}  // namespace distopt
