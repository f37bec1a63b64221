// OptimizerRegistry: optimizer kinds by name ("sgd", "adam", ...).
//
// Registering inserts only if the name is absent, and says whether it did,
// so that a plugin cannot replace a kind already in use. Thread-safe; kinds
// live as long as the registry.
#ifndef DISTOPT_SERVER_OPTIM_REGISTRY_H_
#define DISTOPT_SERVER_OPTIM_REGISTRY_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/optim/optimizer_kind.h"

namespace distopt {

class OptimizerRegistry {
 public:
  // A registry holding the eight built-in kinds: sgd, adam, adamw, adagrad,
  // adadelta, adamax, rmsprop, rprop.
  static std::unique_ptr<OptimizerRegistry> WithBuiltins();

  // Adds `kind` under `name` unless the name is taken; true if added.
  bool Register(const std::string& name, std::unique_ptr<OptimizerKind> kind)
      ABSL_LOCKS_EXCLUDED(mutex_);

  // NOT_FOUND, listing the registered kinds, for an unknown name.
  absl::StatusOr<const OptimizerKind*> Find(const std::string& name) const
      ABSL_LOCKS_EXCLUDED(mutex_);

  // Registered names in alphabetical order.
  std::vector<std::string> Names() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  mutable absl::Mutex mutex_;
  std::map<std::string, std::unique_ptr<OptimizerKind>> kinds_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_REGISTRY_H_
