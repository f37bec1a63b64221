// The optimizer table in checkpoints: every optimizer's id, parameters,
// kind, hyperparameters, state and steps, and the contexts of its recent
// steps (so that a step retried across a restart is still applied once),
// as two sections: "optimizers.binpb" (the header) and "optimizers.bin"
// (the state's values).
#ifndef DISTOPT_SERVER_DIST_OPTIM_OPTIMIZERS_CHECKPOINT_H_
#define DISTOPT_SERVER_DIST_OPTIM_OPTIMIZERS_CHECKPOINT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/dist_optim/optimizer_table.h"
#include "server/params/checkpoint.h"

namespace distopt {

// The sections of a snapshot of the table (OptimizerTable::Snapshot).
std::vector<CheckpointSection> OptimizerSections(
    const std::vector<OptimizerTable::Saved>& saved, uint64_t next_id);

// Restores the optimizers the sections hold into `table` (empty); a
// checkpoint without them (saved before optimizers were kept) restores
// none. DATA_LOSS for damage, as CheckpointSections's reads.
// `dropped` gets a line for each optimizer left out (see
// OptimizerTable::Restore).
absl::Status RestoreOptimizers(const CheckpointSections& sections,
                               OptimizerTable& table,
                               std::vector<std::string>* dropped = nullptr);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DIST_OPTIM_OPTIMIZERS_CHECKPOINT_H_
