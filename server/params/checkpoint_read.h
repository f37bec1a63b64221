// Reading a checkpoint's files: in blocks, checksummed as they arrive,
// straight into the memory that keeps the values (host tensors, or a
// device's through a staging ring), and around the page cache where the
// file system allows it.
#ifndef DISTOPT_SERVER_PARAMS_CHECKPOINT_READ_H_
#define DISTOPT_SERVER_PARAMS_CHECKPOINT_READ_H_

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/backend.h"

namespace distopt {

// zlib's crc32, as checkpoints (format 2 and later) record it, computed by
// libdeflate: with the CPU's carry-less multiply it runs several times
// faster, and a restore checks every byte it reads with it (zlib's took a
// third of a restore's CPU time).
uint32_t Crc32(uint32_t crc, const char* data, size_t size);

// DATA_LOSS naming `path` and what is wrong with it.
absl::Status DamagedFile(const std::filesystem::path& path,
                         absl::string_view what);

// A file that cannot be opened or read (`error` is the errno): damage when
// it is not there, but not when this process may not or cannot read it now
// (permissions, too many open files, an I/O error): that fails the restore
// and leaves the checkpoint as it is, rather than setting it aside as
// damaged.
absl::Status UnreadableFile(const std::filesystem::path& path, int error);

// Reads `size` bytes of the file open as `fd` (at `path`) at `offset` into
// `into`; DATA_LOSS when the file ends first.
absl::Status ReadExactly(int fd, const std::filesystem::path& path,
                         uint64_t offset, size_t size, char* into);

// What a ReadScattered did, for tests and benchmarks.
struct ScatteredReadStats {
  uint64_t direct_bytes = 0;  // Read around the page cache.
};

// Reads the bytes of the file open as `fd` (at `path`) from `offset` on, in
// order, straight into `destinations` (host memory), and continues crc32s
// over them: `crcs` holds one (all the bytes continue it) or one per
// destination. Once a destination's bytes have all arrived (and, one crc32
// each, its crc32 is whole), `check` is called with its index, in order: an
// error it returns stops the read and is returned (a damaged value need not
// wait for the rest of the file). DATA_LOSS when the file ends first.
//
// Where a destination and its place in the file are aligned as the file
// system's direct I/O needs (statx's STATX_DIOALIGN), its bytes are read
// around the page cache (O_DIRECT): the disk writes them into the
// destination itself, with no page cache to fill and copy out of, the
// larger part of a buffered read's CPU time. The rest is read through the
// page cache.
absl::Status ReadScattered(
    int fd, const std::filesystem::path& path, uint64_t offset,
    absl::Span<const absl::Span<char>> destinations, absl::Span<uint32_t> crcs,
    absl::FunctionRef<absl::Status(size_t)> check =
        [](size_t) { return absl::OkStatus(); },
    ScatteredReadStats* stats = nullptr);

// One destination, continuing `*crc`.
absl::Status ReadScattered(int fd, const std::filesystem::path& path,
                           uint64_t offset, absl::Span<char> into,
                           uint32_t* crc);

// Reads [offset, offset + length) of `path` onto the device memory at
// `device` (of `backend`) through a ring of host blocks in `*staging` (kept
// for the next value), and continues the crc32 in `*crc` over it.
absl::Status ReadToDevice(int fd, const std::filesystem::path& path,
                          uint64_t offset, uint64_t length, Backend& backend,
                          char* device, std::vector<char>* staging,
                          uint32_t* crc);

}  // namespace distopt

#endif  // DISTOPT_SERVER_PARAMS_CHECKPOINT_READ_H_
