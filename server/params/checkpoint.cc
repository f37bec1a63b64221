#include "server/params/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/wire_parameter.h"
#include "server/params/checkpoint_index.pb.h"

namespace distopt {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kFormat = 1;
constexpr char kIndexName[] = "index.binpb";
// Values move between device and file in blocks of this size, so that a
// large parameter never needs a host copy of its whole size.
constexpr size_t kBlockBytes = size_t{64} << 20;

std::string ValuesFile(const fs::path& dir, uint64_t id) {
  return (dir / absl::StrCat(id, ".bin")).string();
}

// Writes `size` bytes produced block by block by `read` into `path`, and
// makes them durable before returning.
template <typename Read>
absl::Status WriteDurably(const std::string& path, size_t size, Read read) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", path));
  std::vector<char> block(std::min(size, kBlockBytes));
  absl::Status status;
  for (size_t offset = 0; offset < size && status.ok();) {
    const size_t length = std::min(kBlockBytes, size - offset);
    status = read(offset, length, block.data());
    for (size_t done = 0; status.ok() && done < length;) {
      const ssize_t n = write(fd, block.data() + done, length - done);
      if (n <= 0)
        status = absl::InternalError(absl::StrCat("cannot write ", path));
      else
        done += static_cast<size_t>(n);
    }
    offset += length;
  }
  if (status.ok() && fsync(fd) != 0) {
    status = absl::InternalError(absl::StrCat("cannot sync ", path));
  }
  close(fd);
  return status;
}

absl::Status SyncDirectory(const fs::path& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot open ", dir.string()));
  fsync(fd);
  close(fd);
  return absl::OkStatus();
}

absl::Status FromErrorCode(const std::error_code& error,
                           absl::string_view what) {
  if (!error) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", error.message()));
}

}  // namespace

absl::StatusOr<size_t> SaveCheckpoint(const ParameterStore& store,
                                      const std::string& dir) {
  const fs::path root(dir);
  const fs::path fresh = root / "parameters.new";
  const fs::path current = root / "parameters";
  const fs::path old = root / "parameters.old";
  std::error_code error;
  fs::create_directories(root, error);
  fs::remove_all(fresh, error);
  fs::create_directory(fresh, error);
  absl::Status status = FromErrorCode(error, "--checkpoint_dir=" + dir);
  if (!status.ok()) return status;

  checkpoint::CheckpointIndex index;
  index.set_format(kFormat);
  index.set_next_id(store.next_id());
  const std::vector<ParameterInfo> all =
      store.List("", 0, std::numeric_limits<size_t>::max()).parameters;
  for (const ParameterInfo& info : all) {
    absl::StatusOr<std::shared_ptr<Parameter>> parameter =
        store.Find(ParameterKey::ById(info.id));
    if (!parameter.ok()) return parameter.status();
    status = WriteDurably(
        ValuesFile(fresh, info.id), static_cast<size_t>(info.byte_size),
        [&](size_t offset, size_t length, char* out) {
          return (*parameter)->ReadBytes(info.version, offset, length, out);
        });
    if (!status.ok()) return status;
    ParameterInfoToProto(info, index.add_parameters());
  }
  const std::string serialized = index.SerializeAsString();
  status = WriteDurably((fresh / kIndexName).string(), serialized.size(),
                        [&](size_t offset, size_t length, char* out) {
                          std::copy_n(serialized.data() + offset, length, out);
                          return absl::OkStatus();
                        });
  if (!status.ok()) return status;
  status = SyncDirectory(fresh);
  if (!status.ok()) return status;

  // Swap the new checkpoint in; a crash between the renames leaves .old.
  fs::remove_all(old, error);
  if (fs::exists(current)) fs::rename(current, old, error);
  if (!error) fs::rename(fresh, current, error);
  status = FromErrorCode(error, "replacing the checkpoint in " + dir);
  if (!status.ok()) return status;
  fs::remove_all(old, error);
  status = SyncDirectory(root);
  if (!status.ok()) return status;
  return all.size();
}

absl::StatusOr<size_t> LoadCheckpoint(ParameterStore& store,
                                      const std::string& dir) {
  fs::path folder = fs::path(dir) / "parameters";
  if (!fs::exists(folder)) folder = fs::path(dir) / "parameters.old";
  if (!fs::exists(folder)) return 0;

  std::ifstream index_file(folder / kIndexName, std::ios::binary);
  checkpoint::CheckpointIndex index;
  if (!index_file || !index.ParseFromIstream(&index_file)) {
    return absl::DataLossError(absl::StrCat("--checkpoint_dir=", dir, ": ",
                                            (folder / kIndexName).string(),
                                            " is missing or damaged"));
  }
  if (index.format() != kFormat) {
    return absl::DataLossError(
        absl::StrCat("--checkpoint_dir=", dir, ": checkpoint format ",
                     index.format(), "; expected ", kFormat));
  }
  for (const v1::ParameterInfo& proto : index.parameters()) {
    absl::StatusOr<ParameterInfo> info = ParameterInfoFromProto(proto);
    if (!info.ok()) return absl::DataLossError(info.status().message());
    // The device is this daemon's, whatever it was when saved.
    const std::string path = ValuesFile(folder, info->id);
    std::error_code error;
    const uintmax_t size = fs::file_size(path, error);
    if (error || size != static_cast<uintmax_t>(info->byte_size)) {
      return absl::DataLossError(absl::StrCat(
          "--checkpoint_dir=", dir, ": ", path, " should hold ",
          info->byte_size, " bytes for parameter \"", info->name, "\""));
    }
    absl::Status status = store.Restore(*info, [&](Tensor& values) {
      std::ifstream in(path, std::ios::binary);
      std::vector<char> block(std::min(values.byte_size(), kBlockBytes));
      char* base = static_cast<char*>(values.data());
      for (size_t offset = 0; offset < values.byte_size();) {
        const size_t length =
            std::min(kBlockBytes, values.byte_size() - offset);
        if (!in.read(block.data(), static_cast<std::streamsize>(length))) {
          return absl::DataLossError(absl::StrCat("cannot read ", path));
        }
        absl::Status copied =
            store.backend()->CopyFromHost(base + offset, block.data(), length);
        if (!copied.ok()) return copied;
        offset += length;
      }
      return absl::OkStatus();
    });
    if (!status.ok()) return status;
  }
  store.ReserveIdsBelow(index.next_id());
  return static_cast<size_t>(index.parameters_size());
}

}  // namespace distopt
