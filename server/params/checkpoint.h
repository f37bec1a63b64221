// Parameter checkpoints: with --checkpoint_dir the daemon restores its
// parameters (ids, names, versions and values) from the folder at start-up
// and saves them there when it shuts down gracefully.
//
// Layout: DIR/parameters/index.binpb (a CheckpointIndex in a checksummed
// envelope) and one DIR/parameters/<id>.bin per parameter, whose crc32 the
// index holds. A save is written to DIR/parameters.new, fsynced, and
// swapped in by renames; the `keep` checkpoints before it stay as
// DIR/parameters.<n> (the higher n, the newer). A restore checks the
// index, every field and size before it restores anything, and each values
// file's checksum as it reads it (one pass); on any damage it undoes what
// it restored and falls back to the newest whole previous checkpoint,
// saying so.
#ifndef DISTOPT_SERVER_PARAMS_CHECKPOINT_H_
#define DISTOPT_SERVER_PARAMS_CHECKPOINT_H_

#include <string>

#include "absl/status/statusor.h"
#include "server/params/parameter_store.h"

namespace distopt {

// Writes every parameter of `store`, keeping the `keep` checkpoints before
// it; returns how many parameters. Call it when no writes are in flight (a
// parameter changing mid-save is an ABORTED error).
absl::StatusOr<size_t> SaveCheckpoint(const ParameterStore& store,
                                      const std::string& dir, int keep = 1);

struct RestoredCheckpoint {
  size_t parameters = 0;
  // Empty when the newest checkpoint was restored (or there was none);
  // otherwise which previous one was, and why each newer one was not.
  std::string fell_back;
};

// Restores the parameters saved in `dir` into an empty `store` (none when
// `dir` holds no checkpoint yet), and removes what an unfinished save left.
// DATA_LOSS naming the file and what is wrong when no checkpoint in `dir`
// is whole.
absl::StatusOr<RestoredCheckpoint> LoadCheckpoint(ParameterStore& store,
                                                  const std::string& dir);

// INVALID_ARGUMENT unless `dir` is (or can be made) a folder this process
// can write: checked at start-up, not at the first save.
absl::Status CheckCheckpointDir(const std::string& dir);

}  // namespace distopt

#endif  // DISTOPT_SERVER_PARAMS_CHECKPOINT_H_
