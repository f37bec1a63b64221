// The last phase of a gradient-sharded ZeRO step, bucket by bucket: the
// parameters each rank has just stepped reach every rank through one
// all-gather of the bucket (each rank sends (W-1)/W of its bytes, in a
// ring) instead of one broadcast per owner. In a bucket of large
// parameters (256 KiB or more on average) the bytes go straight from the
// owners' tensors into the others' (each in its own dtype), with no copy;
// a bucket of small ones is packed into one transient buffer of the
// bucket's parameters' size (see Communicator::AllGatherSegments).
#ifndef DISTOPT_SERVER_ZERO_PARAMETER_GATHER_H_
#define DISTOPT_SERVER_ZERO_PARAMETER_GATHER_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/comm/communicator.h"
#include "server/data_parallel/gradient_buckets.h"
#include "server/data_parallel/param_groups.h"

namespace distopt {

// Collective. Every rank's parameters (or slices of them) in `bucket` end
// with their owner's values: call it once the owners have stepped the
// bucket.
absl::Status GatherBucketParameters(Communicator& communicator,
                                    const GradientBucket& bucket,
                                    const std::vector<ParamGroup>& groups);

}  // namespace distopt

#endif  // DISTOPT_SERVER_ZERO_PARAMETER_GATHER_H_
