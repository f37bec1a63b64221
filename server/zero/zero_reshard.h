// A ZeRO group that resumes at another world size than its checkpoint was
// saved at: each rank reads the state of the parameters its new partition
// gives it from the files of the ranks that saved them, through the
// manifest in its checkpoint. The partition at the saved world size
// (computed as then, with no communication) says which saved ranks' shards
// hold them, so a rank reads only those, one at a time: no rank ever holds
// the whole state.
#ifndef DISTOPT_SERVER_ZERO_ZERO_RESHARD_H_
#define DISTOPT_SERVER_ZERO_ZERO_RESHARD_H_

#include <vector>

#include "absl/status/statusor.h"
#include "server/data_parallel/param_groups.h"
#include "server/data_parallel/restored_checkpoint.h"
#include "server/optim/functional_optimizer.h"
#include "server/zero/partition.h"

namespace distopt {

// The state dict (at global positions, with every group's hyperparameters
// as saved) holding the state of the parameters `partition` gives `rank`,
// as the checkpoint `resume` names saved it. FAILED_PRECONDITION naming
// the folder and the rank when a saved rank's file cannot be found or
// read whole.
absl::StatusOr<OptimizerStateDict> ReadReshardedState(
    const GroupResume& resume, const std::vector<ParamGroup>& groups,
    const ZeroPartition& partition, int rank);

}  // namespace distopt

#endif  // DISTOPT_SERVER_ZERO_ZERO_RESHARD_H_
