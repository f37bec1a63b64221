#include "server/params/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cpu_backend.h"
#include "common/dtype.h"
#include "common/shape.h"
#include "common/wire_parameter.h"
#include "server/params/checkpoint_index.pb.h"
#include "server/params/checkpoint_read.h"
#include "server/params/parameter_locks.h"

namespace distopt {
namespace {

namespace fs = std::filesystem;

// Formats 2 and 3: index.binpb is kMagic, the payload's crc32 (4 bytes,
// little endian), then the payload, a CheckpointIndex that holds each
// parameter's values' crc32 (and, from format 3, the sections'). Format 3
// keeps the values in one file (kValuesName), format 2 in one file per
// parameter (<id>.bin); format 1 (the bare index, no checksums, a file per
// parameter) still loads.
constexpr uint32_t kFormat = 3;
constexpr uint32_t kFormatWithoutSections = 2;
constexpr uint32_t kFormatWithoutChecksums = 1;
constexpr char kMagic[8] = {'D', 'O', 'P', 'T', 'C', 'K', 'P', '2'};
constexpr char kIndexName[] = "index.binpb";
// Format 3: every parameter's values, in the index's order.
constexpr char kValuesName[] = "values.bin";
// A save writes in blocks of this size, one written while the next is
// copied and checksummed (so a large parameter never needs a host copy of
// its whole size, and the disk and the CPU work at once).
constexpr size_t kBlockBytes = size_t{8} << 20;
// The k-th checkpoint before the newest (k >= 1).
fs::path Previous(const fs::path& root, int k) {
  return root / absl::StrCat("parameters.", k);
}

// What a failed file operation's errno means to a caller: a full disk (or
// quota), RESOURCE_EXHAUSTED, so that it can tell it from damage; a folder
// this daemon may not write (permissions, read-only, immutable),
// FAILED_PRECONDITION, for the operator to fix; anything else, INTERNAL.
absl::StatusCode CodeOfErrno(int error) {
  switch (error) {
    case ENOSPC:
    case EDQUOT:
      return absl::StatusCode::kResourceExhausted;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status FromErrorCode(const std::error_code& error,
                           absl::string_view what) {
  if (!error) return absl::OkStatus();
  const int errno_value = error.category() == std::generic_category() ||
                                  error.category() == std::system_category()
                              ? error.value()
                              : 0;
  return absl::Status(CodeOfErrno(errno_value),
                      absl::StrCat(what, ": ", error.message()));
}

// Kept checkpoints are numbered 1, 2, ... by this daemon; a folder with a
// larger number is not one of them (it is left alone), so that the next
// number can never overflow.
constexpr int kMaxKeptNumber = 999'999'999;

// The numbers of the kept checkpoints in `root`, in increasing order (a
// crash between a save's renames may leave gaps).
absl::StatusOr<std::vector<int>> KeptNumbers(const fs::path& root) {
  std::vector<int> kept;
  std::error_code error;
  fs::directory_iterator it(root, error);
  for (; !error && it != fs::directory_iterator(); it.increment(error)) {
    const std::string filename = it->path().filename().string();
    absl::string_view name = filename;
    int k = 0;
    if (absl::ConsumePrefix(&name, "parameters.") &&
        absl::SimpleAtoi(name, &k) && k >= 1 && k <= kMaxKeptNumber) {
      kept.push_back(k);
    }
  }
  if (error && error != std::errc::no_such_file_or_directory) {
    return FromErrorCode(error, "listing " + root.string());
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

// Whether anything is at `path`, a link that leads nowhere (or in a loop)
// included: such a checkpoint is damaged, not missing.
bool Exists(const fs::path& path) {
  std::error_code error;
  return fs::exists(fs::symlink_status(path, error));
}

// FAILED_PRECONDITION when the newest checkpoint could not be moved aside:
// the highest number a kept one can have is taken.
absl::Status CheckNextNumber(const fs::path& root,
                             const std::vector<int>& kept) {
  if (kept.empty() || kept.back() < kMaxKeptNumber) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "--checkpoint_dir=", root.string(), ": ",
      Previous(root, kMaxKeptNumber).string(),
      " is the last number a kept checkpoint can have; expected the kept "
      "checkpoints renumbered from 1 (or moved away)"));
}

// Moves the newest checkpoint aside as the newest kept one (numbers only
// grow: nothing is ever renumbered).
absl::Status MoveNewestAside(const fs::path& root) {
  const fs::path newest = root / "parameters";
  if (!Exists(newest)) return absl::OkStatus();
  absl::StatusOr<std::vector<int>> kept = KeptNumbers(root);
  if (!kept.ok()) return kept.status();
  absl::Status numbered = CheckNextNumber(root, *kept);
  if (!numbered.ok()) return numbered;
  std::error_code error;
  fs::rename(newest, Previous(root, kept->empty() ? 1 : kept->back() + 1),
             error);
  return FromErrorCode(error, "retiring " + newest.string());
}

// Drops the oldest kept checkpoints beyond `keep`.
absl::Status DropBeyond(const fs::path& root, int keep) {
  absl::StatusOr<std::vector<int>> kept = KeptNumbers(root);
  if (!kept.ok()) return kept.status();
  std::error_code error;
  const size_t stay = static_cast<size_t>(keep);
  for (size_t i = 0; i + stay < kept->size(); ++i) {
    fs::remove_all(Previous(root, (*kept)[i]), error);
    if (error) return FromErrorCode(error, "dropping an old checkpoint");
  }
  return absl::OkStatus();
}

std::string ValuesFile(const fs::path& dir, uint64_t id) {
  return (dir / absl::StrCat(id, ".bin")).string();
}

// The error of a failed write or sync of `path` (CodeOfErrno).
absl::Status WriteError(absl::string_view what, const std::string& path,
                        int error) {
  return absl::Status(
      CodeOfErrno(error),
      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(error)));
}

// Host memory aligned for O_DIRECT (on huge-page boundaries).
struct FreeDeleter {
  void operator()(char* data) const { std::free(data); }
};
using AlignedBlock = std::unique_ptr<char[], FreeDeleter>;
constexpr size_t kDirectAlignment = 4096;

AlignedBlock AllocateAligned(size_t size) {
  const size_t rounded =
      std::max(kDirectAlignment, (size + kDirectAlignment - 1) /
                                     kDirectAlignment * kDirectAlignment);
  return AlignedBlock(static_cast<char*>(std::aligned_alloc(
      size_t{2} << 20, (rounded + (size_t{2} << 20) - 1) / (size_t{2} << 20) *
                           (size_t{2} << 20))));
}

// Writes [data, data + length) at `offset`. With O_DIRECT the length must
// be a whole number of kDirectAlignment.
absl::Status WriteAt(int fd, const char* data, size_t length, size_t offset,
                     const std::string& path) {
  while (length > 0) {
    const ssize_t n = pwrite(fd, data, length, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && (fcntl(fd, F_GETFL) & O_DIRECT) != 0) {
      // A filesystem that takes O_DIRECT at open but not in writes.
      if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_DIRECT) != 0) {
        return WriteError("write", path, errno);
      }
      continue;
    }
    if (n <= 0) return WriteError("write", path, n < 0 ? errno : ENOSPC);
    data += n;
    offset += static_cast<size_t>(n);
    length -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// One part of a file being written: its bytes, and (out) their crc32.
struct Segment {
  size_t size = 0;
  const ByteReader* read = nullptr;
  uint32_t crc = 0;
};

// Writes `segments` one after the other into `path`, and makes them
// durable before returning; each segment gets its crc32. The bytes go
// around the page cache (O_DIRECT) where the filesystem allows it: at the
// disk's own bandwidth, without spending the CPU (which on a small node is
// the trainer's) on copying model-sized bytes into the cache. A block is
// written while the next is read and checksummed; the tail that is not a
// whole number of kDirectAlignment goes through the cache, last.
absl::Status WriteDurably(const std::string& path,
                          std::vector<Segment>& segments) {
  size_t size = 0;
  for (Segment& segment : segments) {
    size += segment.size;
    segment.crc = Crc32(0, nullptr, 0);
  }
  bool direct = true;
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0 && errno == EINVAL) {  // tmpfs, among others.
    direct = false;
    fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  if (fd < 0) return WriteError("create", path, errno);
  const size_t block_bytes = std::min(size, kBlockBytes);
  AlignedBlock blocks[2] = {AllocateAligned(block_bytes),
                            AllocateAligned(block_bytes)};
  absl::Status status = blocks[0] != nullptr && blocks[1] != nullptr
                            ? absl::OkStatus()
                            : absl::ResourceExhaustedError(absl::StrCat(
                                  "no memory for the blocks to write ", path));
  std::future<absl::Status> writing;
  auto wait = [&] {
    if (!writing.valid()) return;
    absl::Status written = writing.get();
    if (status.ok()) status = written;
  };
  // Where the next block's bytes come from.
  size_t segment = 0;
  size_t within = 0;
  for (size_t offset = 0, k = 0; offset < size && status.ok(); ++k) {
    const size_t length = std::min(kBlockBytes, size - offset);
    char* block = blocks[k % 2].get();
    for (size_t filled = 0; filled < length && status.ok();) {
      while (within == segments[segment].size) {
        ++segment;
        within = 0;
      }
      Segment& from = segments[segment];
      const size_t part = std::min(length - filled, from.size - within);
      status = (*from.read)(within, part, block + filled);
      from.crc = Crc32(from.crc, block + filled, part);
      filled += part;
      within += part;
    }
    wait();  // The other block's write.
    if (!status.ok()) break;
    const size_t whole =
        direct ? length / kDirectAlignment * kDirectAlignment : length;
    if (whole == length) {
      writing = std::async(std::launch::async, [=, &path] {
        return WriteAt(fd, block, length, offset, path);
      });
    } else {
      status = WriteAt(fd, block, whole, offset, path);
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_DIRECT);
      direct = false;
      if (status.ok()) {
        status =
            WriteAt(fd, block + whole, length - whole, offset + whole, path);
      }
    }
    offset += length;
  }
  wait();
  if (status.ok() && fsync(fd) != 0) status = WriteError("sync", path, errno);
  close(fd);
  return status;
}

// One reader, one segment.
absl::Status WriteDurably(const std::string& path, size_t size,
                          const ByteReader& read, uint32_t* crc) {
  std::vector<Segment> segments = {{size, &read}};
  absl::Status status = WriteDurably(path, segments);
  *crc = segments[0].crc;
  return status;
}

absl::Status SyncDirectory(const fs::path& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot open ", dir.string()));
  const bool synced = fsync(fd) == 0;
  close(fd);
  if (!synced) {
    return absl::InternalError(absl::StrCat("cannot sync ", dir.string()));
  }
  return absl::OkStatus();
}

std::string Envelope(const std::string& payload) {
  const uint32_t crc =
      Crc32(Crc32(0, nullptr, 0), payload.data(), payload.size());
  std::string bytes(kMagic, sizeof(kMagic));
  for (int i = 0; i < 4; ++i)
    bytes.push_back(static_cast<char>(crc >> (8 * i)));
  return bytes + payload;
}

// A checkpoint folder whose index (and its checksum), fields and file sizes
// were checked; the values files' checksums are checked as Restore reads
// them.
struct Verified {
  fs::path folder;
  checkpoint::CheckpointIndex index;
  std::vector<ParameterInfo> infos;
};

// The size of `path`, whose `status` was just read: damage unless it is a
// regular file (a folder, a FIFO or a device: a link to /dev/zero holds no
// checkpoint, however much it gives).
absl::StatusOr<uint64_t> RegularSize(const fs::path& path,
                                     const struct stat& status) {
  const mode_t mode = status.st_mode;
  if (S_ISREG(mode)) return static_cast<uint64_t>(status.st_size);
  const char* what = S_ISDIR(mode)                    ? "a folder"
                     : S_ISFIFO(mode)                 ? "a FIFO"
                     : S_ISCHR(mode) || S_ISBLK(mode) ? "a device"
                     : S_ISSOCK(mode)                 ? "a socket"
                                                      : "not a plain file";
  return DamagedFile(
      path, absl::StrCat(what, " where a file of the checkpoint should be"));
}

// The size of the regular file at `path` (links followed); damage when it
// is missing or not a regular file.
absl::StatusOr<uint64_t> RegularFileSize(const fs::path& path) {
  struct stat status;
  if (stat(path.c_str(), &status) != 0) return UnreadableFile(path, errno);
  return RegularSize(path, status);
}

// A section's file name: plain, and never one of the parameters' files
// ("<id>.bin") or the index.
bool IsSectionName(absl::string_view name) {
  if (name.empty() || name.size() > 100 || name == kIndexName ||
      name == kValuesName) {
    return false;
  }
  if (!absl::ascii_islower(name[0]) && name[0] != '_') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_' ||
           c == '.' || c == '-';
  });
}

// The bytes of `values`, in host memory.
absl::Span<char> HostBytes(Tensor& values) {
  return absl::Span<char>(static_cast<char*>(values.data()),
                          values.byte_size());
}

// A parameter's values whose crc32 is not the index's.
absl::Status ValuesDamaged(const fs::path& path, const ParameterInfo& info) {
  return DamagedFile(path, absl::StrCat("checksum mismatch: the values of "
                                        "parameter \"",
                                        info.name, "\" are damaged"));
}

// An open file, closed when it goes.
class OpenFile {
 public:
  // Without blocking: a FIFO put in a file's place must not hang the
  // daemon (reads of a regular file are not affected).
  explicit OpenFile(const fs::path& path)
      : fd_(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)),
        error_(fd_ < 0 ? errno : 0) {}
  ~OpenFile() {
    if (fd_ >= 0) close(fd_);
  }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  int fd() const { return fd_; }
  int error() const { return error_; }  // errno of the open, if it failed.

 private:
  const int fd_;
  const int error_;
};

// Reads a verified checkpoint's sections, checking each one's checksum.
class FolderSections : public CheckpointSections {
 public:
  explicit FolderSections(const Verified& checkpoint)
      : folder_(checkpoint.folder), checkpoint_(checkpoint) {
    for (const checkpoint::Section& section : checkpoint.index.sections()) {
      sections_[section.name()] = &section;
    }
  }

  absl::Status ReadParameterValues(const std::string& name,
                                   Tensor& values) const override {
    uint64_t offset = 0;
    for (size_t i = 0; i < checkpoint_.infos.size(); ++i) {
      const ParameterInfo& info = checkpoint_.infos[i];
      if (info.name != name) {
        offset += static_cast<uint64_t>(info.byte_size);
        continue;
      }
      if (info.dtype != values.dtype() || info.shape != values.shape() ||
          !values.device().is_cpu()) {
        return absl::InvalidArgumentError(absl::StrCat(
            folder_.string(), ": parameter \"", name, "\" was saved as ",
            DTypeName(info.dtype), " ", ShapeToString(info.shape),
            "; expected ", DTypeName(values.dtype()), " ",
            ShapeToString(values.shape()), " in host memory"));
      }
      const fs::path path = folder_ / kValuesName;
      OpenFile file(path);
      if (file.fd() < 0) return UnreadableFile(path, file.error());
      uint32_t crc = Crc32(0, nullptr, 0);
      absl::Status read =
          ReadScattered(file.fd(), path, offset, HostBytes(values), &crc);
      if (!read.ok()) return read;
      if (crc != checkpoint_.index.values_crc32(static_cast<int>(i))) {
        return ValuesDamaged(path, info);
      }
      return absl::OkStatus();
    }
    return absl::NotFoundError(absl::StrCat(
        folder_.string(), ": no parameter \"", name, "\" was saved"));
  }

  bool Has(const std::string& name) const override {
    return sections_.count(name) > 0;
  }

  absl::StatusOr<uint64_t> Size(const std::string& name) const override {
    auto it = sections_.find(name);
    if (it == sections_.end()) {
      return DamagedFile(folder_ / name, "missing from the index");
    }
    return it->second->size();
  }

  absl::StatusOr<std::string> ReadAll(const std::string& name) const override {
    absl::StatusOr<uint64_t> size = Size(name);
    if (!size.ok()) return size.status();
    std::string bytes(*size, '\0');
    const absl::Span<char> whole(bytes.data(), bytes.size());
    absl::Status status = ReadInto(name, absl::MakeConstSpan(&whole, 1));
    if (!status.ok()) return status;
    return bytes;
  }

  absl::Status ReadInto(
      const std::string& name,
      absl::Span<const absl::Span<char>> destinations) const override {
    const fs::path path = folder_ / name;
    auto it = sections_.find(name);
    if (it == sections_.end())
      return DamagedFile(path, "missing from the index");
    const checkpoint::Section& section = *it->second;
    uint64_t total = 0;
    for (absl::Span<char> destination : destinations) {
      total += destination.size();
    }
    if (total != section.size()) {
      return DamagedFile(path, absl::StrCat("holds ", section.size(),
                                            " bytes; ", total, " expected"));
    }
    OpenFile file(path);
    if (file.fd() < 0) return UnreadableFile(path, file.error());
    uint32_t crc = Crc32(0, nullptr, 0);
    absl::Status status = ReadScattered(file.fd(), path, 0, destinations,
                                        absl::MakeSpan(&crc, 1));
    if (!status.ok()) return status;
    if (crc != section.crc32()) {
      return DamagedFile(path, "checksum mismatch: the section is damaged");
    }
    return absl::OkStatus();
  }

 private:
  const fs::path folder_;
  const Verified& checkpoint_;
  std::map<std::string, const checkpoint::Section*> sections_;
};

// An index holds a few dozen bytes a parameter: this is millions of them.
constexpr uint64_t kMaxIndexBytes = uint64_t{256} << 20;

absl::StatusOr<checkpoint::CheckpointIndex> ReadIndex(const fs::path& path) {
  // Read only once it is known to be a regular file of a bounded size
  // (the file opened, not only the path: nothing can be swapped between).
  OpenFile file(path);
  if (file.fd() < 0) return UnreadableFile(path, file.error());
  struct stat status;
  if (fstat(file.fd(), &status) != 0) return UnreadableFile(path, errno);
  absl::StatusOr<uint64_t> file_size = RegularSize(path, status);
  if (!file_size.ok()) return file_size.status();
  if (*file_size > kMaxIndexBytes) {
    return DamagedFile(path,
                       absl::StrCat("holds ", *file_size,
                                    " bytes; expected an index of at most ",
                                    kMaxIndexBytes, " bytes"));
  }
  std::string bytes(*file_size, '\0');
  absl::Status read =
      ReadExactly(file.fd(), path, 0, bytes.size(), bytes.data());
  if (!read.ok()) return read;
  checkpoint::CheckpointIndex index;
  if (bytes.size() >= sizeof(kMagic) + 4 &&
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0) {
    uint32_t stored = 0;
    for (int i = 0; i < 4; ++i) {
      stored |= static_cast<uint32_t>(
                    static_cast<unsigned char>(bytes[sizeof(kMagic) + i]))
                << (8 * i);
    }
    const char* payload = bytes.data() + sizeof(kMagic) + 4;
    const size_t size = bytes.size() - sizeof(kMagic) - 4;
    if (Crc32(Crc32(0, nullptr, 0), payload, size) != stored) {
      return DamagedFile(path, "checksum mismatch (the index is damaged)");
    }
    if (!index.ParseFromArray(payload, static_cast<int>(size)) ||
        (index.format() != kFormat &&
         index.format() != kFormatWithoutSections)) {
      return DamagedFile(
          path, absl::StrCat("not a format ", kFormatWithoutSections, " or ",
                             kFormat, " index"));
    }
    if (index.values_crc32_size() != index.parameters_size()) {
      return DamagedFile(
          path, absl::StrCat(index.values_crc32_size(), " checksums for ",
                             index.parameters_size(), " parameters"));
    }
    return index;
  }
  if (!index.ParseFromString(bytes) ||
      index.format() != kFormatWithoutChecksums) {
    return DamagedFile(path,
                       absl::StrCat("damaged, or a format this daemon does "
                                    "not know (expected ",
                                    kFormat, ")"));
  }
  return index;
}

// The fields of a restored parameter agree with each other: the shape's
// elements, their bytes, an id the daemon could have given, a version that
// can still move on.
absl::Status CheckInfo(const fs::path& index_path, const ParameterInfo& info) {
  const std::string who =
      absl::StrCat("parameter ", info.id, " (\"", info.name, "\")");
  if (info.id == 0)
    return DamagedFile(index_path, who + ": id 0; ids start at 1");
  if (info.id == std::numeric_limits<uint64_t>::max()) {
    return DamagedFile(index_path,
                       who + ": id 2^64-1; expected one that leaves a next id");
  }
  if (info.version == std::numeric_limits<uint64_t>::max()) {
    return DamagedFile(index_path,
                       who + ": version 2^64-1; expected one that can move on");
  }
  int64_t elements = 1;
  for (int64_t d : info.shape) {
    if (d < 0 ||
        (d > 0 && elements > std::numeric_limits<int64_t>::max() /
                                 static_cast<int64_t>(ElementSize(info.dtype)) /
                                 d)) {
      return DamagedFile(index_path, who +
                                         ": a shape with negative or "
                                         "overflowing dimensions");
    }
    elements *= d;
  }
  if (elements != info.num_elements ||
      info.byte_size !=
          elements * static_cast<int64_t>(ElementSize(info.dtype))) {
    return DamagedFile(
        index_path,
        absl::StrCat(who, ": ", info.num_elements, " elements, ",
                     info.byte_size, " bytes; the shape and dtype give ",
                     elements, " elements"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Verified> Verify(const fs::path& folder) {
  Verified verified;
  verified.folder = folder;
  const fs::path index_path = folder / kIndexName;
  absl::StatusOr<checkpoint::CheckpointIndex> index = ReadIndex(index_path);
  if (!index.ok()) return index.status();
  verified.index = *std::move(index);
  std::set<uint64_t> ids;
  std::set<std::string> names;
  for (int i = 0; i < verified.index.parameters_size(); ++i) {
    absl::StatusOr<ParameterInfo> info =
        ParameterInfoFromProto(verified.index.parameters(i));
    if (!info.ok()) return DamagedFile(index_path, info.status().message());
    absl::Status valid = CheckInfo(index_path, *info);
    if (!valid.ok()) return valid;
    if (!ids.insert(info->id).second || !names.insert(info->name).second) {
      return DamagedFile(
          index_path, absl::StrCat("parameter ", info->id, " (\"", info->name,
                                   "\") twice"));
    }
    if (verified.index.format() < kFormat) {
      const std::string path = ValuesFile(folder, info->id);
      absl::StatusOr<uint64_t> size = RegularFileSize(path);
      if (!size.ok()) return size.status();
      if (*size != static_cast<uint64_t>(info->byte_size)) {
        return DamagedFile(
            path, absl::StrCat("should hold ", info->byte_size,
                               " bytes for parameter \"", info->name, "\""));
      }
    }
    verified.infos.push_back(*std::move(info));
  }
  if (verified.index.format() >= kFormat) {
    const fs::path path = folder / kValuesName;
    absl::StatusOr<uint64_t> file_size = RegularFileSize(path);
    if (!file_size.ok()) return file_size.status();
    const uint64_t size = *file_size;
    // Summed against the file's size, so that no sizes (however large)
    // can wrap around to agree with it.
    uint64_t total = 0;
    for (const ParameterInfo& info : verified.infos) {
      const uint64_t bytes = static_cast<uint64_t>(info.byte_size);
      if (bytes > size - total) {
        return DamagedFile(path, absl::StrCat("holds ", size,
                                              " bytes; the "
                                              "parameters' values take more"));
      }
      total += bytes;
    }
    if (size != total) {
      return DamagedFile(path, absl::StrCat("should hold ", total,
                                            " bytes, the parameters' values"));
    }
  }
  std::set<std::string> sections;
  for (const checkpoint::Section& section : verified.index.sections()) {
    if (!IsSectionName(section.name()) ||
        !sections.insert(section.name()).second) {
      return DamagedFile(index_path,
                         absl::StrCat("section \"", section.name(),
                                      "\": a bad or repeated name"));
    }
    const fs::path path = folder / section.name();
    absl::StatusOr<uint64_t> size = RegularFileSize(path);
    if (!size.ok()) return size.status();
    if (*size != section.size()) {
      return DamagedFile(
          path, absl::StrCat("holds ", *size, " bytes; ", section.size(),
                             " expected (a section)"));
    }
  }
  return verified;
}

// Reads every parameter's values into `values` (one tensor each, in the
// index's order), checking each one's crc32 as it is read (one pass over
// the files).
absl::Status ReadValues(const Verified& checkpoint, Backend& backend,
                        absl::Span<Tensor> values) {
  const size_t count = checkpoint.infos.size();
  const bool checked = checkpoint.index.format() != kFormatWithoutChecksums;
  std::vector<uint32_t> crcs(count, Crc32(0, nullptr, 0));
  // Format 3 holds the values one after the other in one file: host values
  // are read from it in one go, straight into their tensors.
  const bool one_file = checkpoint.index.format() >= kFormat;
  if (one_file && count > 0 && values[0].device().is_cpu()) {
    const fs::path path = checkpoint.folder / kValuesName;
    OpenFile file(path);
    if (file.fd() < 0) return UnreadableFile(path, file.error());
    std::vector<absl::Span<char>> destinations;
    for (Tensor& tensor : values) destinations.push_back(HostBytes(tensor));
    // Each value is checked as soon as it is whole: a damaged one ends the
    // read there.
    return ReadScattered(
        file.fd(), path, 0, destinations, absl::MakeSpan(crcs), [&](size_t i) {
          return crcs[i] == checkpoint.index.values_crc32(static_cast<int>(i))
                     ? absl::OkStatus()
                     : ValuesDamaged(path, checkpoint.infos[i]);
        });
  }
  // Device values, through host staging; older formats, a file each.
  std::unique_ptr<OpenFile> file;
  uint64_t offset = 0;        // In the one values file of format 3.
  std::vector<char> staging;  // For values that are not on the host.
  for (size_t i = 0; i < count; ++i) {
    const ParameterInfo& info = checkpoint.infos[i];
    const fs::path path =
        one_file ? checkpoint.folder / kValuesName
                 : fs::path(ValuesFile(checkpoint.folder, info.id));
    if (!one_file || file == nullptr) {
      file = std::make_unique<OpenFile>(path);
      offset = 0;
      // Every value follows in order: read ahead past the one being read
      // (a hint).
      if (one_file && file->fd() >= 0) {
        posix_fadvise(file->fd(), 0, 0, POSIX_FADV_WILLNEED);
      }
    }
    if (file->fd() < 0) return UnreadableFile(path, file->error());
    char* base = static_cast<char*>(values[i].data());
    absl::Status read;
    if (values[i].device().is_cpu()) {
      read = ReadScattered(file->fd(), path, offset, HostBytes(values[i]),
                           &crcs[i]);
    } else {
      read = ReadToDevice(file->fd(), path, offset, values[i].byte_size(),
                          backend, base, &staging, &crcs[i]);
    }
    if (!read.ok()) return read;
    if (checked &&
        crcs[i] != checkpoint.index.values_crc32(static_cast<int>(i))) {
      return ValuesDamaged(path, info);
    }
    offset += static_cast<uint64_t>(info.byte_size);
  }
  return absl::OkStatus();
}

// Restores the parameters and then the sections. On any failure the
// parameters are deleted again: the store is as it was, for the next
// candidate.
absl::Status Restore(ParameterStore& store, const Verified& checkpoint,
                     const SectionsRestorer& restore_sections) {
  // The device is this daemon's, whatever it was when saved.
  absl::Status status =
      store.Restore(checkpoint.infos, [&](absl::Span<Tensor> values) {
        return ReadValues(checkpoint, *store.backend(), values);
      });
  // The index's fields were checked, but the store checks more (names,
  // ranks): what it refuses, a checksummed index should never hold.
  if (absl::IsInvalidArgument(status)) {
    status = DamagedFile(checkpoint.folder / kIndexName, status.message());
  }
  // What this daemon cannot hold (its memory, its budget) is no damage,
  // but the message names the checkpoint.
  if (absl::IsResourceExhausted(status)) {
    status = absl::ResourceExhaustedError(absl::StrCat(
        "restoring ", checkpoint.folder.string(), ": ", status.message()));
  }
  if (!status.ok()) return status;
  if (restore_sections != nullptr) {
    status = restore_sections(FolderSections(checkpoint));
  }
  if (!status.ok()) {
    for (const ParameterInfo& info : checkpoint.infos) {
      store.Delete(ParameterKey::ById(info.id)).IgnoreError();
    }
    return status;
  }
  store.ReserveIdsBelow(checkpoint.index.next_id());
  return absl::OkStatus();
}

}  // namespace

CheckpointSection BytesSection(const std::string& name, std::string bytes) {
  auto shared = std::make_shared<const std::string>(std::move(bytes));
  CheckpointSection section;
  section.name = name;
  section.size = shared->size();
  section.read = [shared](size_t offset, size_t length, char* out) {
    shared->copy(out, length, offset);
    return absl::OkStatus();
  };
  return section;
}

absl::StatusOr<bool> ReadMessageSection(
    const CheckpointSections& sections, const std::string& name,
    google::protobuf::MessageLite* message) {
  if (!sections.Has(name)) return false;
  absl::StatusOr<std::string> bytes = sections.ReadAll(name);
  if (!bytes.ok()) return bytes.status();
  if (!message->ParseFromString(*bytes)) {
    return absl::DataLossError(
        absl::StrCat("section ", name, ": not a ", message->GetTypeName()));
  }
  return true;
}

CheckpointContents LiveContents(const ParameterStore& store) {
  CheckpointContents contents;
  contents.next_parameter_id = store.next_id();
  for (const ParameterInfo& info :
       store.List("", 0, std::numeric_limits<size_t>::max()).parameters) {
    absl::StatusOr<std::shared_ptr<Parameter>> parameter =
        store.Find(ParameterKey::ById(info.id));
    if (!parameter.ok()) continue;  // Deleted meanwhile.
    contents.parameters.push_back(
        {info, [parameter = *parameter, version = info.version](
                   size_t offset, size_t length, char* out) {
           return parameter->ReadBytes(version, offset, length, out);
         }});
  }
  return contents;
}

absl::Status PrepareCopies(const ParameterStore& store,
                           std::map<uint64_t, Tensor>* recycled) {
  std::map<uint64_t, Tensor> prepared;
  for (const ParameterInfo& info :
       store.List("", 0, std::numeric_limits<size_t>::max()).parameters) {
    auto old = recycled->find(info.id);
    if (old != recycled->end() && old->second.dtype() == info.dtype &&
        old->second.shape() == info.shape) {
      prepared[info.id] = old->second;
      continue;
    }
    absl::StatusOr<Tensor> copy = Tensor::AllocateHost(info.dtype, info.shape);
    if (!copy.ok()) return copy.status();
    std::memset(copy->data(), 0, copy->byte_size());  // Touched now.
    prepared[info.id] = *std::move(copy);
  }
  *recycled = std::move(prepared);
  return absl::OkStatus();
}

absl::StatusOr<CheckpointContents> CopyContents(
    const ParameterStore& store, std::map<uint64_t, Tensor>* recycled) {
  CheckpointContents contents;
  contents.next_parameter_id = store.next_id();
  std::vector<ParameterInfo> infos;
  std::vector<std::shared_ptr<Parameter>> parameters;
  for (const ParameterInfo& info :
       store.List("", 0, std::numeric_limits<size_t>::max()).parameters) {
    absl::StatusOr<std::shared_ptr<Parameter>> parameter =
        store.Find(ParameterKey::ById(info.id));
    if (!parameter.ok()) continue;  // Deleted meanwhile.
    infos.push_back(info);
    parameters.push_back(*std::move(parameter));
  }
  // All at once (in id order, like every multi-parameter lock): a step
  // that updates several parameters is in the copy whole or not at all.
  SharedParameterLocks locks(parameters);
  std::map<uint64_t, Tensor> kept;  // The copies, for `recycled`.
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Parameter& parameter = *parameters[i];
    parameter.mutex().AssertReaderHeld();
    if (parameter.deleted_locked()) continue;
    const Tensor& values = parameter.values_shared_locked();
    absl::StatusOr<Tensor> copy = absl::UnknownError("not copied");
    auto old = recycled != nullptr ? recycled->find(parameter.id())
                                   : std::map<uint64_t, Tensor>::iterator();
    if (recycled != nullptr && old != recycled->end() &&
        old->second.dtype() == values.dtype() &&
        old->second.shape() == values.shape()) {
      absl::Status copied = store.backend()->CopyToHost(
          old->second.data(), values.data(), values.byte_size());
      if (!copied.ok()) return copied;
      copy = old->second;
    } else {
      copy = values.CloneTo(CpuBackend());
    }
    if (!copy.ok()) return copy.status();
    if (recycled != nullptr) kept[parameter.id()] = *copy;
    ParameterInfo info = infos[i];
    info.version = parameter.version_locked();
    contents.parameters.push_back(
        {info,
         [copy = *std::move(copy)](size_t offset, size_t length, char* out) {
           std::memcpy(out, static_cast<const char*>(copy.data()) + offset,
                       length);
           return absl::OkStatus();
         }});
  }
  if (recycled != nullptr) *recycled = std::move(kept);
  return contents;
}

namespace {

// Writes the files of `contents` and their index into `folder`.
absl::StatusOr<SavedCheckpoint> WriteFolder(const CheckpointContents& contents,
                                            const fs::path& folder) {
  SavedCheckpoint saved;
  checkpoint::CheckpointIndex index;
  index.set_format(kFormat);
  index.set_next_id(contents.next_parameter_id);
  saved.saved_at = absl::Now();
  index.set_saved_at_unix_micros(absl::ToUnixMicros(saved.saved_at));
  index.set_reason(contents.reason);
  std::vector<Segment> values;
  for (const CheckpointParameter& parameter : contents.parameters) {
    values.push_back(
        {static_cast<size_t>(parameter.info.byte_size), &parameter.read});
    ParameterInfoToProto(parameter.info, index.add_parameters());
    saved.bytes += static_cast<uint64_t>(parameter.info.byte_size);
  }
  absl::Status written = WriteDurably((folder / kValuesName).string(), values);
  if (!written.ok()) return written;
  for (const Segment& segment : values) index.add_values_crc32(segment.crc);
  for (const CheckpointSection& section : contents.sections) {
    if (!IsSectionName(section.name)) {
      return absl::InternalError(
          absl::StrCat("section \"", section.name, "\": not a plain name"));
    }
    checkpoint::Section* entry = index.add_sections();
    uint32_t crc = 0;
    absl::Status status = WriteDurably((folder / section.name).string(),
                                       section.size, section.read, &crc);
    if (!status.ok()) return status;
    entry->set_name(section.name);
    entry->set_size(section.size);
    entry->set_crc32(crc);
    saved.bytes += section.size;
  }
  const std::string serialized = Envelope(index.SerializeAsString());
  uint32_t index_crc = 0;
  absl::Status status =
      WriteDurably((folder / kIndexName).string(), serialized.size(),
                   [&](size_t offset, size_t length, char* out) {
                     std::copy_n(serialized.data() + offset, length, out);
                     return absl::OkStatus();
                   },
                   &index_crc);
  if (status.ok()) status = SyncDirectory(folder);
  if (!status.ok()) return status;
  saved.parameters = contents.parameters.size();
  saved.sections = contents.sections.size();
  return saved;
}

}  // namespace

absl::StatusOr<SavedCheckpoint> SaveCheckpoint(
    const CheckpointContents& contents, const std::string& dir, int keep) {
  if (keep < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep: ", keep, "; expected 0 or more"));
  }
  const absl::Time start = absl::Now();
  const fs::path root(dir);
  const fs::path fresh = root / "parameters.new";
  const fs::path current = root / "parameters";
  const fs::path legacy = root / "parameters.old";
  std::error_code error;
  fs::create_directories(root, error);
  // Refused before anything is written (rather than after the write).
  if (!error) {
    absl::StatusOr<std::vector<int>> kept = KeptNumbers(root);
    if (!kept.ok()) return kept.status();
    absl::Status numbered = CheckNextNumber(root, *kept);
    if (!numbered.ok()) return numbered;
  }
  if (!error && !Exists(current) && Exists(fresh) && Verify(fresh).ok()) {
    // A save that failed after moving the newest aside left its whole
    // checkpoint here: it is the newest, not a leftover.
    fs::rename(fresh, current, error);
  }
  if (!error) fs::remove_all(fresh, error);
  if (!error) fs::create_directory(fresh, error);
  absl::Status status = FromErrorCode(error, "--checkpoint_dir=" + dir);
  if (!status.ok()) return status;
  absl::StatusOr<SavedCheckpoint> saved = WriteFolder(contents, fresh);
  if (!saved.ok()) {
    // What did not fit (or failed) goes, so that the disk has the room it
    // had; the checkpoints before it were not touched.
    fs::remove_all(fresh, error);
    return saved.status();
  }

  // Swap the new checkpoint in and keep the `keep` ones before it, to fall
  // back on if a newer one is found damaged: the newest becomes
  // parameters.<n> (n above every kept one), the new one takes its place,
  // and only then do the oldest beyond `keep` go. The new one is whole on
  // disk first, so a crash anywhere in between leaves it to a restore (see
  // LoadCheckpoint), and a crash before the drop leaves one kept too many
  // (the next save drops it).
  fs::remove_all(legacy, error);
  status = MoveNewestAside(root);
  if (!status.ok()) return status;
  fs::rename(fresh, current, error);
  status = FromErrorCode(error, "replacing the checkpoint in " + dir);
  if (status.ok()) status = SyncDirectory(root);
  if (!status.ok()) return status;
  // Saved: what follows is cleaning up, and a folder that cannot be
  // dropped now is dropped by a later save.
  saved->took = absl::Now() - start;
  DropBeyond(root, keep).IgnoreError();
  return saved;
}

absl::StatusOr<SavedCheckpoint> SaveCheckpoint(const ParameterStore& store,
                                               const std::string& dir,
                                               int keep) {
  CheckpointContents contents = LiveContents(store);
  contents.reason = "shutdown";
  return SaveCheckpoint(contents, dir, keep);
}

absl::StatusOr<RestoredCheckpoint> LoadCheckpoint(
    ParameterStore& store, const std::string& dir,
    const SectionsRestorer& restore_sections) {
  const fs::path root(dir);
  const fs::path newest = root / "parameters";
  const fs::path fresh = root / "parameters.new";
  // A save writes and fsyncs the new checkpoint whole before it rotates the
  // others: a parameters.new that verifies is newer than anything else
  // here, whatever point of the rotation a crash stopped, and the rotation
  // is finished now. One that does not verify is what an unfinished save
  // left: never restored, never kept.
  RestoredCheckpoint restored;
  if (Exists(fresh)) {
    std::error_code error;
    absl::StatusOr<Verified> whole = Verify(fresh);
    if (!whole.ok() && !absl::IsDataLoss(whole.status())) {
      return whole.status();
    }
    if (whole.ok()) {
      absl::Status retired = MoveNewestAside(root);
      if (!retired.ok()) return retired;
      fs::rename(fresh, newest, error);
      absl::Status status =
          FromErrorCode(error, "finishing the interrupted save in " + dir);
      if (status.ok()) status = SyncDirectory(root);
      if (!status.ok()) return status;
      restored.interrupted_save = absl::StrCat(
          fresh.string(), " was whole: its save was finished (renamed to ",
          newest.string(), ")");
    } else {
      fs::remove_all(fresh, error);
      restored.interrupted_save = absl::StrCat(
          fresh.string(), " was removed", error ? " (or tried: " : "",
          error ? error.message() : "", error ? ")" : "",
          ": an interrupted save left it unfinished (",
          whole.status().message(), ")");
    }
  }

  // Newest first: the checkpoint, then the kept ones from the highest
  // number down, then the previous checkpoint of daemons that kept it as
  // parameters.old.
  absl::StatusOr<std::vector<int>> kept = KeptNumbers(root);
  if (!kept.ok()) return kept.status();
  std::vector<fs::path> candidates = {newest};
  for (auto k = kept->rbegin(); k != kept->rend(); ++k) {
    candidates.push_back(Previous(root, *k));
  }
  candidates.push_back(root / "parameters.old");

  std::vector<std::string> problems;
  std::vector<fs::path> damaged;
  for (const fs::path& candidate : candidates) {
    if (!Exists(candidate)) {
      // Only the newest may be missing: a crash between the renames.
      if (candidate == candidates.front()) {
        problems.push_back(absl::StrCat(candidate.string(),
                                        ": missing (a save did not finish)"));
      }
      continue;
    }
    absl::StatusOr<Verified> verified = Verify(candidate);
    if (!verified.ok() && !absl::IsDataLoss(verified.status())) {
      return verified.status();  // Unreadable now, not damaged.
    }
    if (!verified.ok()) {
      problems.push_back(std::string(verified.status().message()));
      damaged.push_back(candidate);
      continue;
    }
    absl::Status status = Restore(store, *verified, restore_sections);
    if (absl::IsDataLoss(status)) {  // A values file found damaged.
      problems.push_back(std::string(status.message()));
      damaged.push_back(candidate);
      continue;
    }
    if (!status.ok()) return status;
    restored.parameters = verified->infos.size();
    restored.folder = candidate.string();
    if (candidate != candidates.front()) {
      restored.fell_back = absl::StrCat(
          candidate.string(), " was restored: ", absl::StrJoin(problems, "; "));
    }
    // The damaged ones newer than it go aside (kept for inspection, never
    // restored), so that later saves do not keep them in place of good
    // ones.
    for (const fs::path& bad : damaged) {
      std::error_code error;
      const fs::path aside =
          fs::path(bad.string() +
                   absl::StrCat(".damaged-", absl::ToUnixSeconds(absl::Now())));
      fs::rename(bad, aside, error);
      if (error) {
        return FromErrorCode(error,
                             "setting the damaged " + bad.string() + " aside");
      }
    }
    return restored;
  }
  // Nothing saved yet: no folder at all.
  if (problems.size() == 1 && !Exists(candidates.front())) {
    return restored;
  }
  return absl::DataLossError(
      absl::StrCat("--checkpoint_dir=", dir,
                   ": no whole checkpoint: ", absl::StrJoin(problems, "; ")));
}

absl::Status VisitCheckpoints(
    const std::string& dir,
    absl::FunctionRef<absl::StatusOr<bool>(const std::string&,
                                           const CheckpointSections&)>
        visit,
    std::vector<std::string>* skipped) {
  const fs::path root(dir);
  absl::StatusOr<std::vector<int>> kept = KeptNumbers(root);
  if (!kept.ok()) return kept.status();
  // A parameters.new that verifies is the newest (its save stopped before
  // the renames); one being written now does not verify yet.
  std::vector<fs::path> folders = {root / "parameters.new",
                                   root / "parameters"};
  for (auto k = kept->rbegin(); k != kept->rend(); ++k) {
    folders.push_back(Previous(root, *k));
  }
  for (const fs::path& folder : folders) {
    if (!Exists(folder)) continue;
    absl::StatusOr<Verified> verified = Verify(folder);
    if (!verified.ok() && !absl::IsDataLoss(verified.status())) {
      return verified.status();
    }
    if (!verified.ok()) {
      skipped->push_back(std::string(verified.status().message()));
      continue;
    }
    FolderSections sections(*verified);
    absl::StatusOr<bool> found = visit(folder.string(), sections);
    if (absl::IsDataLoss(found.status())) {
      skipped->push_back(std::string(found.status().message()));
      continue;
    }
    if (!found.ok()) return found.status();
    if (*found) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CheckpointListing>> ListCheckpoints(
    const std::string& dir) {
  const fs::path root(dir);
  absl::StatusOr<std::vector<int>> kept = KeptNumbers(root);
  if (!kept.ok()) return kept.status();
  std::vector<fs::path> folders = {root / "parameters"};
  for (auto k = kept->rbegin(); k != kept->rend(); ++k) {
    folders.push_back(Previous(root, *k));
  }
  std::vector<CheckpointListing> listings;
  for (const fs::path& folder : folders) {
    if (!Exists(folder)) continue;
    CheckpointListing listing;
    listing.folder = folder.filename().string();
    listing.saved_at = absl::InfinitePast();
    absl::StatusOr<Verified> verified = Verify(folder);
    listing.whole = verified.ok();
    if (!verified.ok()) {
      listing.problem = std::string(verified.status().message());
      listings.push_back(std::move(listing));
      continue;
    }
    const checkpoint::CheckpointIndex& index = verified->index;
    if (index.saved_at_unix_micros() != 0) {
      listing.saved_at = absl::FromUnixMicros(index.saved_at_unix_micros());
    }
    listing.reason = index.reason();
    listing.parameters = verified->infos.size();
    for (const ParameterInfo& info : verified->infos) {
      listing.bytes += static_cast<uint64_t>(info.byte_size);
    }
    for (const checkpoint::Section& section : index.sections()) {
      listing.sections.push_back(section.name());
      listing.bytes += section.size();
    }
    listings.push_back(std::move(listing));
  }
  return listings;
}

absl::StatusOr<int> LockCheckpointDir(const std::string& dir) {
  const std::string path = (fs::path(dir) / ".lock").string();
  // Open for writing: on NFS, flock is emulated with a POSIX write lock,
  // which a read-only descriptor cannot take.
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--checkpoint_dir=", dir,
                                                   ": cannot open ", path, " (",
                                                   std::strerror(errno), ")"));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_dir=", dir, ": ",
        error == EWOULDBLOCK ? "another daemon uses this folder (it holds "
                             : "cannot lock ",
        path,
        error == EWOULDBLOCK ? ")" : absl::StrCat(": ", std::strerror(error)),
        "; expected a folder of this daemon's own"));
  }
  return fd;
}

absl::Status CheckStillLocked(const std::string& dir, int lock_fd) {
  const std::string path = (fs::path(dir) / ".lock").string();
  struct stat held;
  struct stat there;
  if (fstat(lock_fd, &held) != 0) {
    return absl::InternalError(
        absl::StrCat("--checkpoint_dir=", dir, ": cannot check the lock ", path,
                     " this daemon holds: ", std::strerror(errno)));
  }
  if (stat(path.c_str(), &there) != 0 || there.st_dev != held.st_dev ||
      there.st_ino != held.st_ino) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--checkpoint_dir=", dir,
        ": the folder this daemon locked at start-up was removed, moved or "
        "replaced (",
        path, " is not the lock it holds)"));
  }
  return absl::OkStatus();
}

absl::Status CheckCheckpointDir(const std::string& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error || !fs::is_directory(dir)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_dir=", dir, ": not a folder that can be made",
        error ? absl::StrCat(" (", error.message(), ")") : ""));
  }
  // Writable now, not only at the first save, after the session's work.
  const std::string probe = (fs::path(dir) / ".distopt_write_probe").string();
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--checkpoint_dir=", dir, ": cannot write into it (",
                     std::strerror(errno), "); expected a writable folder"));
  }
  close(fd);
  unlink(probe.c_str());
  return absl::OkStatus();
}

}  // namespace distopt
