#include "server/optim/registry.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/quoted.h"
#include "server/optim/builtin_kinds.h"

namespace distopt {

std::unique_ptr<OptimizerRegistry> OptimizerRegistry::WithBuiltins() {
  auto registry = std::make_unique<OptimizerRegistry>();
  registry->Register("sgd", MakeSgd());
  registry->Register("adam", MakeAdam());
  registry->Register("adamw", MakeAdamW());
  registry->Register("adagrad", MakeAdagrad());
  registry->Register("adadelta", MakeAdadelta());
  registry->Register("adamax", MakeAdamax());
  registry->Register("rmsprop", MakeRmsprop());
  registry->Register("rprop", MakeRprop());
  return registry;
}

bool OptimizerRegistry::Register(const std::string& name,
                                 std::unique_ptr<OptimizerKind> kind) {
  absl::MutexLock lock(&mutex_);
  return kinds_.emplace(name, std::move(kind)).second;
}

absl::StatusOr<const OptimizerKind*> OptimizerRegistry::Find(
    const std::string& name) const {
  absl::MutexLock lock(&mutex_);
  auto it = kinds_.find(name);
  if (it != kinds_.end()) return it->second.get();
  std::vector<std::string> names;
  for (const auto& entry : kinds_) names.push_back(entry.first);
  return absl::NotFoundError(absl::StrCat("kind: no optimizer kind ",
                                          Quoted(name), "; expected one of ",
                                          absl::StrJoin(names, ", ")));
}

std::vector<std::string> OptimizerRegistry::Names() const {
  absl::MutexLock lock(&mutex_);
  std::vector<std::string> names;
  for (const auto& entry : kinds_) names.push_back(entry.first);
  return names;
}

}  // namespace distopt
