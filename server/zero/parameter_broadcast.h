// The last phase of a ZeRO step: the parameters an owner rank has just
// stepped reach every rank. Either one broadcast per parameter (small ones
// packed together, see the .cc), or, with parameters_as_bucket_view, flat
// buckets per (owner, dtype) of at most the bucket size: the owner packs
// its stepped parameters of that dtype into one buffer, broadcasts it, and
// the others unpack it. Only parameters
// that had a gradient on some rank are sent; the others did not change
// anywhere.
#ifndef DISTOPT_SERVER_ZERO_PARAMETER_BROADCAST_H_
#define DISTOPT_SERVER_ZERO_PARAMETER_BROADCAST_H_

#include <vector>

#include "absl/status/status.h"
#include "common/device_buffer.h"
#include "server/comm/communicator.h"
#include "server/data_parallel/gradient_buckets.h"
#include "server/data_parallel/param_groups.h"
#include "server/zero/partition.h"

namespace distopt {

// Collective over `communicator` (whose device holds the parameters).
// Sends `owner`'s stepped parameters to all ranks. Buckets are packed in
// `scratch` (on the parameters' device), which the caller keeps from step
// to step, at most `bucket_bytes` at a time (a larger parameter goes alone,
// from its own memory).
absl::Status BroadcastFromOwner(Communicator& communicator,
                                const std::vector<ParamGroup>& groups,
                                const ZeroPartition& partition,
                                const Presence& present, int owner,
                                bool as_buckets, int64_t bucket_bytes,
                                DeviceBuffer* scratch);

}  // namespace distopt

#endif  // DISTOPT_SERVER_ZERO_PARAMETER_BROADCAST_H_
