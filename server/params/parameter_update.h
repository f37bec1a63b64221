// ParameterUpdate: several parameters changed in place as one update (an
// optimizer step). It holds their locks exclusively for its lifetime, taken
// in id order (parameter_locks.h), so no reader sees a half-done update;
// Commit moves the versions of the parameters that changed, so a backward
// recorded before the update is refused after it. Not thread-safe (one
// updater holds it).
#ifndef DISTOPT_SERVER_PARAMS_PARAMETER_UPDATE_H_
#define DISTOPT_SERVER_PARAMS_PARAMETER_UPDATE_H_

#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "common/tensor.h"
#include "server/params/parameter.h"
#include "server/params/parameter_locks.h"

namespace distopt {

class ParameterUpdate {
 public:
  // `parameters` must be distinct.
  explicit ParameterUpdate(std::vector<std::shared_ptr<Parameter>> parameters);
  ParameterUpdate(const ParameterUpdate&) = delete;
  ParameterUpdate& operator=(const ParameterUpdate&) = delete;

  // FAILED_PRECONDITION naming the first parameter deleted since the
  // caller found it.
  absl::Status CheckNoneDeleted() const;

  // The parameters' values, in the caller's order, to change in place.
  std::vector<Tensor*> values() const;

  // After a successful update: the versions of the parameters for which
  // `changed(index)` is true move on.
  void Commit(absl::FunctionRef<bool(size_t index)> changed);
  void CommitAll();

 private:
  const std::vector<std::shared_ptr<Parameter>> parameters_;
  ExclusiveParameterLocks locks_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_PARAMS_PARAMETER_UPDATE_H_
