// Averages parameters across the ranks of a communicator, in buckets that
// bound the scratch memory: float32 parameters larger than half a bucket
// are averaged in place (no copy at all); the others are widened to fp32
// into a bucket of at most `bucket_elements`, averaged, and written back
// (fp16 and bf16 rounded to nearest even), so half-precision models average
// with fp32 accumulation.
#ifndef DISTOPT_SERVER_LOCALSGD_PARAMETER_AVERAGING_H_
#define DISTOPT_SERVER_LOCALSGD_PARAMETER_AVERAGING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/device_buffer.h"
#include "common/tensor.h"
#include "server/comm/communicator.h"

namespace distopt {

// Collective among `communicator`'s ranks, which pass parameters of the same
// dtypes and shapes in the same order, on the communicator's device.
// `storage` (on that device) is kept by the caller from call to call; it
// holds at most one bucket (or one half-precision parameter larger than a
// bucket).
absl::Status AverageParameters(Communicator& communicator,
                               const std::vector<Tensor*>& params,
                               int64_t bucket_elements, DeviceBuffer* storage);

}  // namespace distopt

#endif  // DISTOPT_SERVER_LOCALSGD_PARAMETER_AVERAGING_H_
