// Averages parameters across the ranks of a communicator in one
// all-reduce: every parameter is widened to fp32 into one flat buffer, the
// buffer is averaged, and the results are written back (fp16 and bf16
// rounded to nearest even), so half-precision models average with fp32
// accumulation.
#ifndef DISTOPT_SERVER_LOCALSGD_PARAMETER_AVERAGING_H_
#define DISTOPT_SERVER_LOCALSGD_PARAMETER_AVERAGING_H_

#include <vector>

#include "absl/status/status.h"
#include "common/tensor.h"
#include "server/comm/communicator.h"

namespace distopt {

// Collective among `communicator`'s ranks, which pass parameters of the same
// dtypes and shapes in the same order. `storage` is kept by the caller from
// call to call.
absl::Status AverageParameters(Communicator& communicator,
                               const std::vector<Tensor*>& params,
                               std::vector<float>* storage);

}  // namespace distopt

#endif  // DISTOPT_SERVER_LOCALSGD_PARAMETER_AVERAGING_H_
