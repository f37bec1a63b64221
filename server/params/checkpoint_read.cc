#include "server/params/checkpoint_read.h"

#include <errno.h>
#include <fcntl.h>
#include <libdeflate.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/params/two_stage_pipeline.h"

namespace distopt {
namespace {

namespace fs = std::filesystem;

// A restore of host values reads in blocks of this size, one read while
// the one before is checksummed: the two overlap except for the first
// block's read and the last one's checksum. Large, because one direct read
// asks the disk for all of its blocks at once: a larger one keeps more of
// them in flight.
constexpr size_t kHostReadBlockBytes = size_t{16} << 20;
// A restore of device values stages through kStagingBlocks host blocks of
// this size.
constexpr size_t kStagingBlockBytes = size_t{4} << 20;
constexpr size_t kStagingBlocks = 4;

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it.
#endif

// Tells the kernel that [offset, offset + length) of `fd` is wanted, in
// order: it reads it ahead at the disk's pace while blocks are checksummed
// and copied (one read at a time, as here, leaves a fast disk idle between
// them). Only a hint.
void WillReadInOrder(int fd, uint64_t offset, uint64_t length) {
  posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(length),
                POSIX_FADV_SEQUENTIAL);
  posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(length),
                POSIX_FADV_WILLNEED);
}

// The same file open a second time for direct I/O (O_DIRECT), with the
// alignments it needs, or not usable: a file system without direct I/O, or
// one that does not say what it needs (tmpfs, NFS, FUSE; any before Linux
// 6.1).
class DirectReads {
 public:
  explicit DirectReads(int fd) {
    // Through /proc: the very file `fd` is, not whatever its path names now.
    const std::string self = absl::StrCat("/proc/self/fd/", fd);
    fd_ = open(self.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) return;
    struct statx status;
    std::memset(&status, 0, sizeof(status));
    if (statx(fd_, "", AT_EMPTY_PATH, STATX_DIOALIGN, &status) == 0 &&
        (status.stx_mask & STATX_DIOALIGN) != 0 &&
        status.stx_dio_mem_align != 0 && status.stx_dio_offset_align != 0) {
      memory_align_ = status.stx_dio_mem_align;
      offset_align_ = status.stx_dio_offset_align;
    } else {
      Stop();
    }
  }
  ~DirectReads() { Stop(); }
  DirectReads(const DirectReads&) = delete;
  DirectReads& operator=(const DirectReads&) = delete;

  // How many of the first `size` bytes at `offset` to read into `into`
  // directly: the most whole aligned blocks, where `into` and `offset` are
  // aligned; 0 otherwise.
  size_t Usable(uint64_t offset, const char* into, size_t size) const {
    if (fd_ < 0 || offset % offset_align_ != 0 ||
        reinterpret_cast<uintptr_t>(into) % memory_align_ != 0) {
      return 0;
    }
    return size / offset_align_ * offset_align_;
  }

  // Reads up to `size` bytes (Usable's) at `offset` into `into` directly;
  // returns how many were read. Fewer on any error or at the end of the
  // file: the caller reads the rest through the page cache, which reports
  // the error or the short file as any read would. An error turns direct
  // reads off for the rest (a refusal of direct I/O itself, EINVAL, would
  // only come again).
  size_t Read(uint64_t offset, char* into, size_t size) {
    size_t done = 0;
    while (done < size) {
      const ssize_t n = pread(fd_, into + done, size - done,
                              static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) Stop();
      if (n <= 0) break;
      done += static_cast<size_t>(n);
      if (done % offset_align_ != 0) break;  // The end of the file.
    }
    return done;
  }

 private:
  void Stop() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
  size_t memory_align_ = 1;
  size_t offset_align_ = 1;
};

// Maps the pages within [data, data + size) of host memory writable
// without changing what they hold (MADV_POPULATE_WRITE, Linux 5.14): false
// where the kernel cannot.
bool FaultIn(char* data, size_t size) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin =
      (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end =
      (reinterpret_cast<uintptr_t>(data) + size) / page * page;
  if (end <= begin) return true;
  return madvise(reinterpret_cast<void*>(begin), end - begin,
                 MADV_POPULATE_WRITE) == 0;
}

// A part of one destination that one block holds.
struct Piece {
  absl::Span<char> bytes;
  size_t destination = 0;
};

}  // namespace

uint32_t Crc32(uint32_t crc, const char* data, size_t size) {
  return libdeflate_crc32(crc, data, size);
}

absl::Status DamagedFile(const fs::path& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path.string(), ": ", what));
}

absl::Status UnreadableFile(const fs::path& path, int error) {
  if (error == ENOENT) return DamagedFile(path, "missing");
  // What an edit of the folder left (a file, or a link to one, where a
  // checkpoint's folder should be; links in a loop): lasting, not "now".
  if (error == ENOTDIR) return DamagedFile(path, "its folder is not a folder");
  if (error == ELOOP) return DamagedFile(path, "a loop of symbolic links");
  return absl::InternalError(
      absl::StrCat("cannot read ", path.string(), ": ", std::strerror(error),
                   " (the checkpoint is left as it is)"));
}

absl::Status ReadExactly(int fd, const fs::path& path, uint64_t offset,
                         size_t size, char* into) {
  for (size_t done = 0; done < size;) {
    const ssize_t n =
        pread(fd, into + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return UnreadableFile(path, errno);
    if (n == 0) return DamagedFile(path, "shorter than its index says");
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Blocks of kHostReadBlockBytes, which may span several destinations, are
// read on a helper thread while the calling thread checksums the block
// before (RunTwoStages).
//
// The destinations are mostly fresh memory (restored tensors), whose first
// touch costs a page fault and a cleared page per page: more than the
// copy, on some machines (a VM whose host backs memory lazily) several
// times more. So while the calling thread waits for a block, it faults in
// the memory of the blocks after it, 2 MiB (a huge page) at a time, and
// the two threads share that cost (a direct read faults in what it writes
// to before the disk is asked, so without this it would wait for both).
// Where the reader is ahead, the pages are already there and faulting them
// in again is cheap.
absl::Status ReadScattered(int fd, const fs::path& path, uint64_t offset,
                           absl::Span<const absl::Span<char>> destinations,
                           absl::Span<uint32_t> crcs,
                           absl::FunctionRef<absl::Status(size_t)> check,
                           ScatteredReadStats* stats) {
  if (crcs.size() != 1 && crcs.size() != destinations.size()) {
    return absl::InternalError(absl::StrCat(
        "ReadScattered: ", crcs.size(), " crc32s for ", destinations.size(),
        " destinations; expected 1 or one each"));
  }
  std::vector<std::vector<Piece>> blocks;
  uint64_t length = 0;
  size_t in_block = kHostReadBlockBytes;
  for (size_t d = 0; d < destinations.size(); ++d) {
    const absl::Span<char> destination = destinations[d];
    for (size_t done = 0; done < destination.size();) {
      if (in_block == kHostReadBlockBytes) {
        blocks.emplace_back();
        in_block = 0;
      }
      const size_t take =
          std::min(destination.size() - done, kHostReadBlockBytes - in_block);
      blocks.back().push_back({destination.subspan(done, take), d});
      done += take;
      in_block += take;
    }
    length += destination.size();
  }
  // Destinations are checked in order once whole: an empty one right
  // after the one before it.
  size_t checked = 0;
  auto check_whole_through = [&](size_t d) {
    for (; checked <= d ||
           (checked < destinations.size() && destinations[checked].empty());
         ++checked) {
      absl::Status status = check(checked);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  };
  if (length == 0) {
    return destinations.empty() ? absl::OkStatus()
                                : check_whole_through(destinations.size() - 1);
  }
  if (destinations[0].empty()) {
    absl::Status status = check_whole_through(0);
    if (!status.ok()) return status;
  }
  DirectReads direct(fd);
  // Read-ahead hints for what goes through the page cache, where that is
  // most of it: with direct reads they would have the disk read the same
  // bytes twice.
  uint64_t position = offset;
  uint64_t direct_bytes = 0;
  for (const std::vector<Piece>& block : blocks) {
    for (const Piece& piece : block) {
      direct_bytes +=
          direct.Usable(position, piece.bytes.data(), piece.bytes.size());
      position += piece.bytes.size();
    }
  }
  if (direct_bytes < length / 2) WillReadInOrder(fd, offset, length);
  constexpr size_t kFaultBytes = size_t{2} << 20;
  size_t fault_block = 1;  // Block 0 is read first.
  size_t fault_piece = 0;
  size_t fault_within = 0;
  bool can_fault = true;
  return RunTwoStages(
      blocks.size(), std::numeric_limits<size_t>::max(),
      [&](size_t k) {
        uint64_t at = offset + k * kHostReadBlockBytes;
        for (const Piece& piece : blocks[k]) {
          char* into = piece.bytes.data();
          const size_t size = piece.bytes.size();
          const size_t directly =
              direct.Read(at, into, direct.Usable(at, into, size));
          if (stats != nullptr) stats->direct_bytes += directly;
          absl::Status read = ReadExactly(fd, path, at + directly,
                                          size - directly, into + directly);
          if (!read.ok()) return read;
          at += size;
        }
        return absl::OkStatus();
      },
      [&](size_t k) {
        for (const Piece& piece : blocks[k]) {
          uint32_t& crc = crcs[crcs.size() == 1 ? 0 : piece.destination];
          crc = Crc32(crc, piece.bytes.data(), piece.bytes.size());
          const absl::Span<char> whole = destinations[piece.destination];
          if (piece.bytes.data() + piece.bytes.size() ==
              whole.data() + whole.size()) {
            absl::Status status = check_whole_through(piece.destination);
            if (!status.ok()) return status;
          }
        }
        return absl::OkStatus();
      },
      [&] {
        if (!can_fault || fault_block >= blocks.size()) return false;
        const absl::Span<char> piece = blocks[fault_block][fault_piece].bytes;
        const size_t size = std::min(kFaultBytes, piece.size() - fault_within);
        can_fault = FaultIn(piece.data() + fault_within, size);
        fault_within += size;
        if (fault_within == piece.size()) {
          fault_within = 0;
          if (++fault_piece == blocks[fault_block].size()) {
            fault_piece = 0;
            ++fault_block;
          }
        }
        return can_fault;
      });
}

absl::Status ReadScattered(int fd, const fs::path& path, uint64_t offset,
                           absl::Span<char> into, uint32_t* crc) {
  return ReadScattered(fd, path, offset, absl::MakeConstSpan(&into, 1),
                       absl::MakeSpan(crc, 1));
}

// A block is read on a helper thread while the calling thread checksums
// the one before and copies it to the device, at most the ring's size
// ahead (block k and block k + kStagingBlocks share a host block).
absl::Status ReadToDevice(int fd, const fs::path& path, uint64_t offset,
                          uint64_t length, Backend& backend, char* device,
                          std::vector<char>* staging, uint32_t* crc) {
  if (length == 0) return absl::OkStatus();
  staging->resize(kStagingBlocks * kStagingBlockBytes);
  const size_t blocks = static_cast<size_t>((length + kStagingBlockBytes - 1) /
                                            kStagingBlockBytes);
  auto size_of = [&](size_t k) {
    return static_cast<size_t>(std::min<uint64_t>(
        kStagingBlockBytes, length - k * kStagingBlockBytes));
  };
  auto host_block = [&](size_t k) {
    return staging->data() + k % kStagingBlocks * kStagingBlockBytes;
  };
  WillReadInOrder(fd, offset, length);
  return RunTwoStages(
      blocks, kStagingBlocks,
      [&](size_t k) {
        return ReadExactly(fd, path, offset + k * kStagingBlockBytes,
                           size_of(k), host_block(k));
      },
      [&](size_t k) {
        *crc = Crc32(*crc, host_block(k), size_of(k));
        return backend.CopyFromHost(device + k * kStagingBlockBytes,
                                    host_block(k), size_of(k));
      });
}

}  // namespace distopt
