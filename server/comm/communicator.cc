#include "server/comm/communicator.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace distopt {

absl::Status Communicator::AllGatherSegments(
    const std::vector<std::vector<absl::Span<char>>>& blocks) {
  if (static_cast<int>(blocks.size()) != size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "blocks: ", blocks.size(), "; expected one per rank (", size(), ")"));
  }
  std::vector<size_t> counts(blocks.size(), 0);
  for (size_t r = 0; r < blocks.size(); ++r) {
    for (absl::Span<char> segment : blocks[r]) counts[r] += segment.size();
  }
  size_t total = 0;
  for (size_t count : counts) total += count;
  // Bounded by the caller's blocks (a bucket); not zero-filled: every byte
  // is written before it is read.
  std::unique_ptr<char[]> buffer(new char[total]);
  char* const packed_data = buffer.get();
  auto for_each_segment = [&](auto visit) {
    size_t offset = 0;
    for (size_t r = 0; r < blocks.size(); ++r) {
      for (absl::Span<char> segment : blocks[r]) {
        visit(static_cast<int>(r), segment, packed_data + offset);
        offset += segment.size();
      }
    }
  };
  for_each_segment([&](int r, absl::Span<char> segment, char* at) {
    if (r == rank() && !segment.empty()) {
      std::memcpy(at, segment.data(), segment.size());
    }
  });
  absl::Status status =
      AllGatherBlocks(absl::MakeSpan(packed_data, total), counts);
  if (!status.ok()) return status;
  for_each_segment([&](int r, absl::Span<char> segment, char* at) {
    if (r != rank() && !segment.empty()) {
      std::memcpy(segment.data(), at, segment.size());
    }
  });
  return absl::OkStatus();
}

}  // namespace distopt
