#include "server/params/checkpoint_read.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

namespace fs = std::filesystem;

uint32_t ZlibCrc(const char* data, size_t size) {
  return static_cast<uint32_t>(crc32(crc32(0, nullptr, 0),
                                     reinterpret_cast<const Bytef*>(data),
                                     static_cast<uInt>(size)));
}

// The file system's alignment for direct reads of `path` (0: none).
size_t DirectAlignment(const fs::path& path) {
  struct statx status;
  std::memset(&status, 0, sizeof(status));
  if (statx(AT_FDCWD, path.c_str(), 0, STATX_DIOALIGN, &status) != 0 ||
      (status.stx_mask & STATX_DIOALIGN) == 0 ||
      status.stx_dio_mem_align > 4096) {
    return 0;
  }
  return status.stx_dio_offset_align;
}

// Page-aligned memory (as large tensors are), freed at the end.
class Pages {
 public:
  explicit Pages(size_t size)
      : size_(size),
        data_(static_cast<char*>(mmap(nullptr, size, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))) {
    if (data_ == MAP_FAILED) std::abort();
  }
  ~Pages() { munmap(data_, size_); }
  char* data() const { return data_; }

 private:
  const size_t size_;
  char* const data_;
};

class CheckpointReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    path_ = fs::path(tmp != nullptr ? tmp : "/tmp") / "values.bin";
  }

  // Writes `size` random bytes to path_ through the page cache, not synced
  // (a direct read must still see them), and opens it for reading.
  int WriteFile(size_t size) {
    bytes_.resize(size);
    std::mt19937 random(7);
    for (char& c : bytes_) c = static_cast<char>(random());
    const int out = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_EQ(write(out, bytes_.data(), size), static_cast<ssize_t>(size));
    close(out);
    fd_ = open(path_.c_str(), O_RDONLY);
    return fd_;
  }

  void TearDown() override {
    if (fd_ >= 0) close(fd_);
  }

  fs::path path_;
  std::string bytes_;
  int fd_ = -1;
};

// Pieces aligned for direct I/O and not (in memory, in the file, in
// length), one of them across several read blocks: every byte lands where
// it belongs and each destination gets its own crc32.
TEST_F(CheckpointReadTest, EveryByteLandsInItsDestination) {
  // From file offset 4096 on.
  const std::vector<size_t> sizes = {
      8192,                       // Aligned in memory and in the file.
      1000,                       // At an odd address.
      3 * 4096 + 100,             // Aligned in memory; not in the file.
      2996,                       // Ends on a page of the file (28672).
      (size_t{40} << 20) + 1000,  // Aligned, across blocks, an unaligned tail.
      (size_t{17} << 20) + 512,   // Not aligned in the file.
  };
  size_t total = 0;
  for (size_t size : sizes) total += size;
  const size_t offset = 4096;  // Where the values begin in the file.
  ASSERT_GE(WriteFile(offset + total), 0);
  // Each destination in memory of its own, page-aligned but the second.
  std::vector<std::unique_ptr<Pages>> memory;
  std::vector<absl::Span<char>> destinations;
  for (size_t d = 0; d < sizes.size(); ++d) {
    memory.push_back(std::make_unique<Pages>(sizes[d] + 4096));
    char* at = memory.back()->data() + (d == 1 ? 3 : 0);
    destinations.emplace_back(at, sizes[d]);
  }
  std::vector<uint32_t> crcs(sizes.size(), ZlibCrc(nullptr, 0));
  std::vector<size_t> checked;
  ScatteredReadStats stats;
  ASSERT_TRUE(ReadScattered(
                  fd_, path_, offset, destinations, absl::MakeSpan(crcs),
                  [&](size_t d) {
                    // Whole when checked.
                    EXPECT_EQ(crcs[d],
                              ZlibCrc(destinations[d].data(), sizes[d]));
                    checked.push_back(d);
                    return absl::OkStatus();
                  },
                  &stats)
                  .ok());
  EXPECT_THAT(checked, ::testing::ElementsAre(0, 1, 2, 3, 4, 5));
  // Only the first value and the fifth's whole blocks were aligned.
  const size_t align = DirectAlignment(path_);
  if (align == 0 || 4096 % align != 0) {
    std::printf("no direct reads where the test runs (%s)\n", path_.c_str());
  } else {
    EXPECT_EQ(stats.direct_bytes, 8192 + sizes[4] / align * align);
  }
  size_t at = offset;
  for (size_t d = 0; d < sizes.size(); ++d) {
    ASSERT_EQ(std::string(destinations[d].data(), sizes[d]),
              bytes_.substr(at, sizes[d]))
        << "destination " << d;
    EXPECT_EQ(crcs[d], ZlibCrc(bytes_.data() + at, sizes[d]))
        << "destination " << d;
    at += sizes[d];
  }
}

// With one crc32, every destination continues it.
TEST_F(CheckpointReadTest, OneCrcCoversEveryDestination) {
  ASSERT_GE(WriteFile(size_t{20} << 20), 0);
  Pages memory(size_t{20} << 20);
  const std::vector<absl::Span<char>> destinations = {
      {memory.data(), size_t{12} << 20},
      {memory.data() + (size_t{12} << 20), size_t{8} << 20}};
  uint32_t crc = ZlibCrc(nullptr, 0);
  ASSERT_TRUE(
      ReadScattered(fd_, path_, 0, destinations, absl::MakeSpan(&crc, 1)).ok());
  EXPECT_EQ(crc, ZlibCrc(bytes_.data(), bytes_.size()));
  EXPECT_EQ(std::string(memory.data(), bytes_.size()), bytes_);
}

// A file shorter than the destinations is damage, also where the part
// missing would have been read directly, where the file ends on an
// aligned boundary inside what is read directly, and where the memory is
// not aligned (no direct reads).
TEST_F(CheckpointReadTest, AShortFileIsDamage) {
  struct Case {
    size_t file_bytes;
    size_t memory_offset;
  };
  for (const Case& c :
       {Case{(size_t{8} << 20) + 1000, 0}, Case{size_t{8} << 20, 0},
        Case{(size_t{8} << 20) + 1000, 1}}) {
    ASSERT_GE(WriteFile(c.file_bytes), 0);
    Pages memory(size_t{10} << 20);
    const absl::Span<char> whole(memory.data() + c.memory_offset,
                                 size_t{9} << 20);
    uint32_t crc = ZlibCrc(nullptr, 0);
    const absl::Status status = ReadScattered(
        fd_, path_, 0, absl::MakeConstSpan(&whole, 1), absl::MakeSpan(&crc, 1));
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_NE(status.message().find("shorter than its index says"),
              std::string::npos)
        << status;
    // What there was arrived.
    EXPECT_EQ(std::string(whole.data(), bytes_.size()), bytes_);
    close(fd_);
    fd_ = -1;
  }
}

// Empty destinations are checked in their turn; the first check that fails
// ends the read with its error, and no later one is checked.
TEST_F(CheckpointReadTest, AFailedCheckEndsTheRead) {
  ASSERT_GE(WriteFile(size_t{40} << 20), 0);
  Pages memory(size_t{40} << 20);
  const std::vector<absl::Span<char>> destinations = {
      {memory.data(), 0},
      {memory.data(), size_t{20} << 20},
      {memory.data() + (size_t{20} << 20), 0},
      {memory.data() + (size_t{20} << 20), size_t{20} << 20}};
  std::vector<uint32_t> crcs(4, ZlibCrc(nullptr, 0));
  std::vector<size_t> checked;
  const absl::Status status = ReadScattered(
      fd_, path_, 0, destinations, absl::MakeSpan(crcs), [&](size_t d) {
        checked.push_back(d);
        return d == 2 ? absl::DataLossError("value 2 is damaged")
                      : absl::OkStatus();
      });
  EXPECT_EQ(status, absl::DataLossError("value 2 is damaged"));
  EXPECT_THAT(checked, ::testing::ElementsAre(0, 1, 2));
}

// An empty destination after the last bytes is checked too.
TEST_F(CheckpointReadTest, AnEmptyLastDestinationIsChecked) {
  ASSERT_GE(WriteFile(size_t{20} << 20), 0);
  Pages memory(size_t{20} << 20);
  const std::vector<absl::Span<char>> destinations = {
      {memory.data(), size_t{20} << 20}, {memory.data(), 0}};
  std::vector<uint32_t> crcs(2, ZlibCrc(nullptr, 0));
  std::vector<size_t> checked;
  ASSERT_TRUE(ReadScattered(fd_, path_, 0, destinations, absl::MakeSpan(crcs),
                            [&](size_t d) {
                              checked.push_back(d);
                              return absl::OkStatus();
                            })
                  .ok());
  EXPECT_THAT(checked, ::testing::ElementsAre(0, 1));
  EXPECT_EQ(crcs[1], ZlibCrc(nullptr, 0));
}

TEST_F(CheckpointReadTest, CrcsMustMatchTheDestinations) {
  ASSERT_GE(WriteFile(100), 0);
  char a[50], b[50];
  const std::vector<absl::Span<char>> destinations = {{a, 50}, {b, 50}};
  std::vector<uint32_t> three(3);
  EXPECT_EQ(
      ReadScattered(fd_, path_, 0, destinations, absl::MakeSpan(three)).code(),
      absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace distopt
