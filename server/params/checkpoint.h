// Parameter checkpoints: with --checkpoint_dir the daemon restores its
// parameters (ids, names, versions and values) from the folder at start-up
// and saves them there when it shuts down gracefully.
//
// Layout: DIR/parameters/index.binpb (a CheckpointIndex) and one
// DIR/parameters/<id>.bin per parameter. A save is written to
// DIR/parameters.new and swapped in by renames, so a crash mid-save leaves
// the previous checkpoint readable (as DIR/parameters, or DIR/parameters.old
// between the two renames).
#ifndef DISTOPT_SERVER_PARAMS_CHECKPOINT_H_
#define DISTOPT_SERVER_PARAMS_CHECKPOINT_H_

#include <string>

#include "absl/status/statusor.h"
#include "server/params/parameter_store.h"

namespace distopt {

// Writes every parameter of `store`; returns how many. Call it when no
// writes are in flight (a parameter changing mid-save is an ABORTED error).
absl::StatusOr<size_t> SaveCheckpoint(const ParameterStore& store,
                                      const std::string& dir);

// Restores the parameters saved in `dir` into an empty `store`; returns how
// many (0 when `dir` holds no checkpoint yet). DATA_LOSS when the
// checkpoint is damaged.
absl::StatusOr<size_t> LoadCheckpoint(ParameterStore& store,
                                      const std::string& dir);

}  // namespace distopt

#endif  // DISTOPT_SERVER_PARAMS_CHECKPOINT_H_
