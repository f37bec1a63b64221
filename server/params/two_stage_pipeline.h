// RunTwoStages: the two stages of a job done block by block (read a block
// from disk, then checksum it) on two threads at once, in order.
#ifndef DISTOPT_SERVER_PARAMS_TWO_STAGE_PIPELINE_H_
#define DISTOPT_SERVER_PARAMS_TWO_STAGE_PIPELINE_H_

#include <cstddef>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace distopt {

// Runs first(k) for k = 0 .. blocks - 1 in order on a helper thread, and
// second(k) in order on the calling thread once first(k) has returned.
// first(k) starts only once second(k - window) has returned, so that
// memory given to block k may be reused for block k + window (window >= 1;
// with `blocks` or more, first never waits). Returns the first error of
// either stage, after the helper has stopped; once a stage has failed,
// neither stage begins another block.
//
// While the calling thread waits for a block's first stage, it calls
// meanwhile() (a small piece of work that speeds the first stage up, such
// as faulting in memory it is to write) until that returns false: the
// first stage is often the slower, and the calling thread's core would
// otherwise sit idle.
absl::Status RunTwoStages(
    size_t blocks, size_t window, absl::FunctionRef<absl::Status(size_t)> first,
    absl::FunctionRef<absl::Status(size_t)> second,
    absl::FunctionRef<bool()> meanwhile = [] { return false; });

}  // namespace distopt

#endif  // DISTOPT_SERVER_PARAMS_TWO_STAGE_PIPELINE_H_
