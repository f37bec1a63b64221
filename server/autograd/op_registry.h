// The autograd ops a daemon runs, by name ("linear", "embedding").
#ifndef DISTOPT_SERVER_AUTOGRAD_OP_REGISTRY_H_
#define DISTOPT_SERVER_AUTOGRAD_OP_REGISTRY_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/autograd/op.h"

namespace distopt {

std::unique_ptr<AutogradOp> MakeLinearOp();
std::unique_ptr<AutogradOp> MakeEmbeddingOp();

// Immutable after construction: safe to share between threads.
class OpRegistry {
 public:
  // linear and embedding.
  OpRegistry();
  // NOT_FOUND, listing the ops, for an unknown name.
  absl::StatusOr<const AutogradOp*> Find(const std::string& name) const;

 private:
  std::map<std::string, std::unique_ptr<AutogradOp>> ops_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_AUTOGRAD_OP_REGISTRY_H_
