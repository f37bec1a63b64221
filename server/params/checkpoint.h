// Checkpoints: with --checkpoint_dir the daemon restores its parameters
// (ids, names, versions and values) and what the layers above add as
// sections (the optimizers' state) from the folder at start-up, and saves
// them there at shutdown, periodically and on demand.
//
// Layout (format 3): DIR/parameters/index.binpb (a CheckpointIndex in a
// checksummed envelope), DIR/parameters/values.bin (every parameter's
// values, one after the other) and one file per section; the index holds
// a crc32 for each parameter's values and for each section, and their
// sizes. A save is written to DIR/parameters.new (around the page cache,
// block by block), fsynced, and swapped in by renames; the `keep`
// checkpoints before it stay as DIR/parameters.<n> (the higher n, the
// newer). A restore checks the index, its fields and every size before it
// restores anything, and each checksum as it reads (one pass); on damage
// it undoes what it restored and falls back to the newest whole previous
// checkpoint, saying so. A file that is there but cannot be read now
// (permissions, an I/O error) fails the restore instead, and the
// checkpoint is left as it is. Formats 1 and 2 (a values file per
// parameter) still load.
#ifndef DISTOPT_SERVER_PARAMS_CHECKPOINT_H_
#define DISTOPT_SERVER_PARAMS_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "google/protobuf/message_lite.h"
#include "server/params/parameter_store.h"

namespace distopt {

// Copies bytes [offset, offset + length) of something being saved to `out`.
using ByteReader =
    std::function<absl::Status(size_t offset, size_t length, char* out)>;

// One parameter of a checkpoint: what the index records, and its values.
struct CheckpointParameter {
  ParameterInfo info;
  ByteReader read;
};

// A file a layer above the parameters adds to a checkpoint (the optimizers'
// state, say): checksummed, sized and verified like the parameters' files.
// `name` is a plain file name ([a-z0-9_.-]).
struct CheckpointSection {
  std::string name;
  size_t size = 0;
  ByteReader read;
};

// A section holding `bytes` (a header, say).
CheckpointSection BytesSection(const std::string& name, std::string bytes);

// What one checkpoint holds.
struct CheckpointContents {
  uint64_t next_parameter_id = 1;
  std::vector<CheckpointParameter> parameters;
  std::vector<CheckpointSection> sections;
  // Why it was taken ("shutdown", "periodic", "on demand"), kept in the
  // index for ListCheckpoints.
  std::string reason;
};

// The parameters read in place: for a daemon with no call in flight (a
// parameter that changes mid-save makes the save ABORTED).
CheckpointContents LiveContents(const ParameterStore& store);

// A copy of every parameter, taken with all their locks held (a step that
// updates several is in it whole or not at all): what a save taken while
// the daemon serves writes. With `recycled` (host copies by parameter id,
// kept from an earlier copy) the values are copied into those that still
// fit, and it is left holding this copy's. RESOURCE_EXHAUSTED when the
// copy does not fit in host memory.
absl::StatusOr<CheckpointContents> CopyContents(
    const ParameterStore& store,
    std::map<uint64_t, Tensor>* recycled = nullptr);

// Makes `recycled` hold a host tensor, its pages touched, for every
// parameter of `store` (and none for parameters that are gone): done
// before CopyContents and outside any lock, so that the copy made under the
// locks only copies.
absl::Status PrepareCopies(const ParameterStore& store,
                           std::map<uint64_t, Tensor>* recycled);

struct SavedCheckpoint {
  size_t parameters = 0;
  size_t sections = 0;
  uint64_t bytes = 0;  // Values and sections, as written.
  // The time its index records (ListCheckpoints reports the same).
  absl::Time saved_at;
  // Until the checkpoint was durable in place (dropping the oldest kept
  // one follows).
  absl::Duration took;
};

// Writes `contents` as the newest checkpoint in `dir`, keeping the `keep`
// checkpoints before it. RESOURCE_EXHAUSTED when the disk is full: the
// previous checkpoints are then as they were. Not thread-safe per `dir`.
absl::StatusOr<SavedCheckpoint> SaveCheckpoint(
    const CheckpointContents& contents, const std::string& dir, int keep = 1);

// Shorthand: LiveContents(store).
absl::StatusOr<SavedCheckpoint> SaveCheckpoint(const ParameterStore& store,
                                               const std::string& dir,
                                               int keep = 1);

// The sections of a checkpoint being restored; every read checks the
// section's size and checksum and answers DATA_LOSS naming the file when
// they do not match.
class CheckpointSections {
 public:
  virtual ~CheckpointSections() = default;
  virtual bool Has(const std::string& name) const = 0;
  // Its size as the index records it (and the file has, verified).
  virtual absl::StatusOr<uint64_t> Size(const std::string& name) const = 0;
  // The whole section.
  virtual absl::StatusOr<std::string> ReadAll(
      const std::string& name) const = 0;
  // The section's bytes, in order, straight into `destinations`, which
  // together must hold exactly its size (DATA_LOSS when they do not). The
  // checksum is known only after the last byte: on an error, what the
  // destinations hold is to be dropped.
  virtual absl::Status ReadInto(
      const std::string& name,
      absl::Span<const absl::Span<char>> destinations) const = 0;
  // The saved values of the parameter named `name` into `values` (host
  // memory, its dtype and shape), checksum checked: a group that falls back
  // to an older group step takes its parameters from that checkpoint.
  // NOT_FOUND when the checkpoint has no such parameter, INVALID_ARGUMENT
  // when its dtype or shape differ, DATA_LOSS for damage.
  virtual absl::Status ReadParameterValues(const std::string& name,
                                           Tensor& values) const = 0;
};

// The section `name` parsed into `message` (a header a layer wrote with
// BytesSection); false, reading nothing, when the checkpoint has no such
// section. DATA_LOSS when it does not parse.
absl::StatusOr<bool> ReadMessageSection(const CheckpointSections& sections,
                                        const std::string& name,
                                        google::protobuf::MessageLite* message);

// Restores what the sections hold, after the parameters were restored. All
// or nothing: on any error it undoes what it did. DATA_LOSS means the
// checkpoint is damaged: the next older one is tried.
using SectionsRestorer = std::function<absl::Status(const CheckpointSections&)>;

struct RestoredCheckpoint {
  size_t parameters = 0;
  // The folder restored; empty when there was none.
  std::string folder;
  // Empty, or what became of the parameters.new an interrupted save left:
  // finished (it was whole) or removed (it was not, and why).
  std::string interrupted_save;
  // Empty when the newest checkpoint was restored (or there was none);
  // otherwise which previous one was, and why each newer one was not.
  std::string fell_back;
};

// Restores the parameters saved in `dir` into an empty `store` (none when
// `dir` holds no checkpoint yet), then `restore_sections` (when given), and
// removes what an unfinished save left. DATA_LOSS naming the file and what
// is wrong when no checkpoint in `dir` is whole.
absl::StatusOr<RestoredCheckpoint> LoadCheckpoint(
    ParameterStore& store, const std::string& dir,
    const SectionsRestorer& restore_sections = nullptr);

// Reads the checkpoints kept in `dir` without restoring anything (another
// rank's folder, when a group resumes at another world size), newest
// first: `visit` gets each whole one's folder name and sections and
// returns true once it found what it looks for, which ends the visit.
// Damaged ones are skipped, each one's problem appended to `skipped`.
absl::Status VisitCheckpoints(
    const std::string& dir,
    absl::FunctionRef<absl::StatusOr<bool>(const std::string& folder,
                                           const CheckpointSections& sections)>
        visit,
    std::vector<std::string>* skipped);

// One checkpoint in a folder, newest first in ListCheckpoints.
struct CheckpointListing {
  std::string folder;   // "parameters", "parameters.3", ...
  bool whole = false;   // Its index and sizes verify (values are not read).
  std::string problem;  // Why not, when not whole.
  absl::Time saved_at;  // Unknown (InfinitePast) for older formats.
  std::string reason;
  size_t parameters = 0;
  std::vector<std::string> sections;
  uint64_t bytes = 0;
};

// The checkpoints kept in `dir`, newest first.
absl::StatusOr<std::vector<CheckpointListing>> ListCheckpoints(
    const std::string& dir);

// Locks `dir` for this process (an flock on DIR/.lock, held while the
// returned descriptor is open): two daemons given the same folder would
// delete each other's saves. INVALID_ARGUMENT naming the folder when
// another process holds it.
absl::StatusOr<int> LockCheckpointDir(const std::string& dir);

// OK while `lock_fd` (from LockCheckpointDir) is still DIR/.lock;
// FAILED_PRECONDITION naming the folder once it was removed, moved or
// replaced under the daemon: a save there would make a new folder that no
// lock guards, which a second daemon could take as well.
absl::Status CheckStillLocked(const std::string& dir, int lock_fd);

// INVALID_ARGUMENT unless `dir` is (or can be made) a folder this process
// can write: checked at start-up, not at the first save.
absl::Status CheckCheckpointDir(const std::string& dir);

}  // namespace distopt

#endif  // DISTOPT_SERVER_PARAMS_CHECKPOINT_H_
