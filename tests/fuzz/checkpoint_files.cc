#include "tests/fuzz/checkpoint_files.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "absl/strings/str_cat.h"
#include "server/params/checkpoint_index.pb.h"
#include "tests/fuzz/fuzz_support.h"

namespace distopt {
namespace fuzz {
namespace {

namespace fs = std::filesystem;

// As server/params/checkpoint.cc writes it.
constexpr char kMagic[8] = {'D', 'O', 'P', 'T', 'C', 'K', 'P', '2'};
constexpr size_t kEnvelopeBytes = sizeof(kMagic) + 4;

bool HasEnvelope(absl::string_view bytes) {
  return bytes.size() >= kEnvelopeBytes &&
         std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0;
}

// The index of `folder` with its checksums and sizes made to agree with the
// files of `files`.
std::string FixContents(const std::string& folder,
                        const std::map<std::string, std::string>& files,
                        absl::string_view index_bytes) {
  const bool envelope = HasEnvelope(index_bytes);
  absl::string_view payload =
      envelope ? index_bytes.substr(kEnvelopeBytes) : index_bytes;
  checkpoint::CheckpointIndex index;
  if (!Parse(payload, &index)) return std::string(index_bytes);
  auto file = [&](const std::string& name) -> absl::string_view {
    auto it = files.find(absl::StrCat(folder, "/", name));
    return it == files.end() ? absl::string_view() : it->second;
  };
  index.clear_values_crc32();
  if (index.format() >= 3) {
    const absl::string_view values = file("values.bin");
    size_t offset = 0;
    for (const v1::ParameterInfo& info : index.parameters()) {
      const size_t left = values.size() - offset;
      const size_t size =
          info.byte_size() < 0
              ? 0
              : std::min<uint64_t>(static_cast<uint64_t>(info.byte_size()),
                                   left);
      index.add_values_crc32(Crc32Of(values.substr(offset, size)));
      offset += size;
    }
  } else {
    for (const v1::ParameterInfo& info : index.parameters()) {
      index.add_values_crc32(Crc32Of(file(absl::StrCat(info.id(), ".bin"))));
    }
  }
  for (checkpoint::Section& section : *index.mutable_sections()) {
    const absl::string_view bytes = file(section.name());
    section.set_size(bytes.size());
    section.set_crc32(Crc32Of(bytes));
  }
  std::string fixed;
  index.SerializeToString(&fixed);
  return envelope ? IndexEnvelope(fixed) : fixed;
}

}  // namespace

uint32_t Crc32Of(absl::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()),
              static_cast<uInt>(bytes.size()));
  return static_cast<uint32_t>(crc);
}

std::string IndexEnvelope(absl::string_view payload) {
  const uint32_t crc = Crc32Of(payload);
  std::string bytes(kMagic, sizeof(kMagic));
  for (int i = 0; i < 4; ++i)
    bytes.push_back(static_cast<char>(crc >> (8 * i)));
  bytes.append(payload.data(), payload.size());
  return bytes;
}

absl::Status WriteCheckpointInput(absl::string_view input,
                                  const std::string& dir, size_t max_bytes) {
  const std::vector<std::string>& names = CheckpointFileNames();
  InputReader in(input);
  const uint8_t flags = in.Byte();
  std::map<std::string, std::string> files;
  size_t total = 0;
  while (!in.empty()) {
    const std::string& name = names[in.Byte() % names.size()];
    const absl::string_view bytes = in.Part();
    total += bytes.size();
    if (total > max_bytes) break;
    files[name] = std::string(bytes);
  }
  for (const char* folder : {"parameters", "parameters.1", "parameters.new"}) {
    auto index = files.find(absl::StrCat(folder, "/index.binpb"));
    if (index == files.end()) continue;
    if (flags & kFixIndexContents) {
      index->second = FixContents(folder, files, index->second);
    }
    if ((flags & kFixIndexEnvelope) && HasEnvelope(index->second)) {
      index->second = IndexEnvelope(
          absl::string_view(index->second).substr(kEnvelopeBytes));
    }
  }
  for (const auto& [name, bytes] : files) {
    const fs::path path = fs::path(dir) / name;
    std::error_code error;
    fs::create_directories(path.parent_path(), error);
    if (error) return absl::InternalError(error.message());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", name));
  }
  return absl::OkStatus();
}

std::string PackCheckpointDir(const std::string& dir, uint8_t flags) {
  const std::vector<std::string>& names = CheckpointFileNames();
  std::string input;
  AppendByte(flags, &input);
  for (size_t i = 0; i < names.size(); ++i) {
    const fs::path path = fs::path(dir) / names[i];
    std::error_code error;
    if (!fs::is_regular_file(path, error)) continue;
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    AppendByte(static_cast<uint8_t>(i), &input);
    AppendPart(bytes, &input);
  }
  return input;
}

}  // namespace fuzz
}  // namespace distopt
