#include "server/params/checkpoint_read.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace distopt {
namespace {

namespace fs = std::filesystem;

uint32_t ZlibCrc(const char* data, size_t size) {
  return static_cast<uint32_t>(crc32(crc32(0, nullptr, 0),
                                     reinterpret_cast<const Bytef*>(data),
                                     static_cast<uInt>(size)));
}

// Page-aligned memory (as large tensors are), freed at the end.
class Pages {
 public:
  explicit Pages(size_t size)
      : size_(size),
        data_(static_cast<char*>(mmap(nullptr, size, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))) {}
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
  ASSERT_TRUE(
      ReadScattered(fd_, path_, offset, destinations, absl::MakeSpan(crcs))
          .ok());
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
// missing would have been read directly.
TEST_F(CheckpointReadTest, AShortFileIsDamage) {
  ASSERT_GE(WriteFile((size_t{8} << 20) + 1000), 0);
  Pages memory(size_t{9} << 20);
  const absl::Span<char> whole(memory.data(), size_t{9} << 20);
  uint32_t crc = ZlibCrc(nullptr, 0);
  const absl::Status status = ReadScattered(
      fd_, path_, 0, absl::MakeConstSpan(&whole, 1), absl::MakeSpan(&crc, 1));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("shorter than its index says"),
            std::string::npos)
      << status;
  // What there was arrived.
  EXPECT_EQ(std::string(memory.data(), bytes_.size()), bytes_);
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
