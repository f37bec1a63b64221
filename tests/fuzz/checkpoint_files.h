// A checkpoint directory (see server/params/checkpoint.h) as one fuzz
// input, and back: a flags byte, then parts of [a file selector byte, the
// file's bytes] (InputReader::Part), the selector taken modulo
// CheckpointFileNames().size(). With the flags the target can make the
// index's checksums agree with the files it wrote, so that mutations of a
// seed reach past the checksums into the parsing of what they cover.
#ifndef DISTOPT_TESTS_FUZZ_CHECKPOINT_FILES_H_
#define DISTOPT_TESTS_FUZZ_CHECKPOINT_FILES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace distopt {
namespace fuzz {

// The index's magic and crc32 around `payload` (format 2 and 3 indexes).
std::string IndexEnvelope(absl::string_view payload);
uint32_t Crc32Of(absl::string_view bytes);

// Writes the files `input` describes under `dir` (an empty folder), and
// applies the fixes its flags ask for. At most `max_bytes` are written in
// all.
absl::Status WriteCheckpointInput(absl::string_view input,
                                  const std::string& dir, size_t max_bytes);

// The input that writes the checkpoint files under `dir` (the names of
// CheckpointFileNames() that exist), with `flags` first.
std::string PackCheckpointDir(const std::string& dir, uint8_t flags);

}  // namespace fuzz
}  // namespace distopt

#endif  // DISTOPT_TESTS_FUZZ_CHECKPOINT_FILES_H_
