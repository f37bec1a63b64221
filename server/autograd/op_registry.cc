#include "server/autograd/op_registry.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/quoted.h"

namespace distopt {

OpRegistry::OpRegistry() {
  ops_["linear"] = MakeLinearOp();
  ops_["embedding"] = MakeEmbeddingOp();
}

absl::StatusOr<const AutogradOp*> OpRegistry::Find(
    const std::string& name) const {
  auto it = ops_.find(name);
  if (it != ops_.end()) return it->second.get();
  std::vector<std::string> names;
  for (const auto& entry : ops_) names.push_back(entry.first);
  return absl::NotFoundError(absl::StrCat("op: no op ", Quoted(name),
                                          "; expected one of ",
                                          absl::StrJoin(names, ", ")));
}

}  // namespace distopt
