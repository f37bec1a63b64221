// What the daemon hooks into the steps of a group optimizer (ZeRO,
// post-local SGD): periodic checkpoints of a group are taken at the same
// group step on every rank, between two steps.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_GROUP_STEP_HOOKS_H_
#define DISTOPT_SERVER_DATA_PARALLEL_GROUP_STEP_HOOKS_H_

#include <cstdint>
#include <functional>

namespace distopt {

struct GroupStepHooks {
  // Before a step takes the optimizer's lock: may wait (for a checkpoint's
  // copy of the state the previous step left).
  std::function<void()> before;
  // After a step, with the group's step count it reached.
  std::function<void(int64_t group_step)> after;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_GROUP_STEP_HOOKS_H_
