// Holds several parameters' locks, taken in increasing id order (the order
// every multi-parameter lock in the daemon uses, so none deadlocks), and
// releases them when it goes out of scope.
#ifndef DISTOPT_SERVER_AUTOGRAD_PARAMETER_LOCKS_H_
#define DISTOPT_SERVER_AUTOGRAD_PARAMETER_LOCKS_H_

#include <algorithm>
#include <memory>
#include <vector>

#include "server/parameter.h"

namespace distopt {

class SharedParameterLocks {
 public:
  // `parameters` must be distinct.
  explicit SharedParameterLocks(
      const std::vector<std::shared_ptr<Parameter>>& parameters) {
    for (const auto& parameter : parameters) order_.push_back(parameter.get());
    std::sort(order_.begin(), order_.end(),
              [](Parameter* a, Parameter* b) { return a->id() < b->id(); });
    for (Parameter* parameter : order_) parameter->mutex().ReaderLock();
  }
  ~SharedParameterLocks() {
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      (*it)->mutex().ReaderUnlock();
    }
  }
  SharedParameterLocks(const SharedParameterLocks&) = delete;
  SharedParameterLocks& operator=(const SharedParameterLocks&) = delete;

 private:
  std::vector<Parameter*> order_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_AUTOGRAD_PARAMETER_LOCKS_H_
