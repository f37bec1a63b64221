// The last phase of a gradient-sharded ZeRO step, bucket by bucket: the
// parameters each rank has just stepped reach every rank through one
// all-gather of the bucket (each rank sends (W-1)/W of its bytes, in a
// ring) instead of one broadcast per owner. The bucket's gradient scratch
// holds the parameters' bytes, in the gradient bucket's layout (block r:
// owner r's parameters, in the bucket's order, each in its own dtype), so
// sending them costs no memory beyond the bucket.
#ifndef DISTOPT_SERVER_ZERO_PARAMETER_GATHER_H_
#define DISTOPT_SERVER_ZERO_PARAMETER_GATHER_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/comm/communicator.h"
#include "server/data_parallel/gradient_buckets.h"
#include "server/data_parallel/param_groups.h"

namespace distopt {

// Collective. Every rank's parameters of `bucket` end with their owner's
// values. `scratch` has at least 4 bytes per element of the bucket (its
// gradients, no longer needed once the owners have stepped them).
absl::Status GatherBucketParameters(Communicator& communicator,
                                    const GradientBucket& bucket,
                                    const std::vector<ParamGroup>& groups,
                                    absl::Span<char> scratch);

}  // namespace distopt

#endif  // DISTOPT_SERVER_ZERO_PARAMETER_GATHER_H_
