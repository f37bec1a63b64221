// Holds several parameters' locks, taken in increasing id order (the order
// every multi-parameter lock in the daemon uses, so none deadlocks), and
// releases them when it goes out of scope: shared for reading (a forward),
// exclusive for writing (an optimizer step).
#ifndef DISTOPT_SERVER_PARAMS_PARAMETER_LOCKS_H_
#define DISTOPT_SERVER_PARAMS_PARAMETER_LOCKS_H_

#include <algorithm>
#include <memory>
#include <vector>

#include "server/params/parameter.h"

namespace distopt {

template <bool kExclusive>
class ParameterLocks {
 public:
  // `parameters` must be distinct.
  explicit ParameterLocks(
      const std::vector<std::shared_ptr<Parameter>>& parameters) {
    for (const auto& parameter : parameters) order_.push_back(parameter.get());
    std::sort(order_.begin(), order_.end(),
              [](Parameter* a, Parameter* b) { return a->id() < b->id(); });
    for (Parameter* parameter : order_) {
      if (kExclusive) {
        parameter->mutex().Lock();
      } else {
        parameter->mutex().ReaderLock();
      }
    }
  }
  ~ParameterLocks() {
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      if (kExclusive) {
        (*it)->mutex().Unlock();
      } else {
        (*it)->mutex().ReaderUnlock();
      }
    }
  }
  ParameterLocks(const ParameterLocks&) = delete;
  ParameterLocks& operator=(const ParameterLocks&) = delete;

 private:
  std::vector<Parameter*> order_;
};

using SharedParameterLocks = ParameterLocks<false>;
using ExclusiveParameterLocks = ParameterLocks<true>;

}  // namespace distopt

#endif  // DISTOPT_SERVER_PARAMS_PARAMETER_LOCKS_H_
