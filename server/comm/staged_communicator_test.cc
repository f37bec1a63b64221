// The staged communicator over gloo ranks in one process, with host memory
// standing in for the device (the CPU backend's copies are memcpy): every
// collective equals gloo's own on the same inputs, at chunk sizes that cut
// the data at every kind of boundary; the staging stays within two chunks;
// a rank whose device copy fails returns that error and its peers finish.
#include "server/comm/staged_communicator.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cpu_backend.h"
#include "common/testing/host_backend.h"
#include "gtest/gtest.h"
#include "server/comm/testing/gloo_test_ranks.h"

namespace distopt {
namespace {

// The CPU backend, counting what is staged and failing the copy to the
// host numbered `fail_copy_to_host` (0: none).
class WatchedBackend : public HostBackend {
 public:
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (++copies_to_host == fail_copy_to_host) {
      return absl::InternalError("cuda:0: device-to-host copy failed: test");
    }
    return HostBackend::CopyToHost(dst, src, bytes);
  }
  absl::StatusOr<void*> AllocateStaging(size_t bytes) override {
    staged_bytes += bytes;
    largest_staging = std::max(largest_staging.load(), bytes);
    return HostBackend::AllocateStaging(bytes);
  }

  std::atomic<size_t> staged_bytes{0};
  std::atomic<size_t> largest_staging{0};
  std::atomic<int> copies_to_host{0};
  int fail_copy_to_host = 0;
};

std::vector<float> Values(int rank, size_t count, int salt) {
  std::mt19937 random(1000 * rank + salt);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> values(count);
  for (float& v : values) v = uniform(random);
  return values;
}

// Sums of three or more ranks may be added in another order by gloo for
// another message size (its all-reduce picks its algorithm by size): equal
// within fp32 rounding then; with two ranks, the same bits.
void ExpectSameSums(const std::vector<float>& want,
                    const std::vector<float>& got, int world) {
  ASSERT_EQ(want.size(), got.size());
  if (world == 2) {
    EXPECT_EQ(want, got);
    return;
  }
  for (size_t e = 0; e < want.size(); ++e) {
    ASSERT_NEAR(want[e], got[e], 4e-7f * (1 + std::abs(want[e]))) << e;
  }
}

// Every collective through `staged` and through gloo itself (`plain`), on
// the same inputs, for arrays of each of `sizes`: the same bits, but for
// the order of sums (above).
void ExpectSameAsGloo(Communicator& plain, Communicator& staged,
                      const std::vector<size_t>& sizes) {
  const int w = plain.size();
  const int r = plain.rank();
  for (size_t n : sizes) {
    SCOPED_TRACE(absl::StrCat("n = ", n));
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      std::vector<float> want = Values(r, n, 1), got = want;
      ASSERT_TRUE(plain.AllReduce(absl::MakeSpan(want), op).ok());
      ASSERT_TRUE(staged.AllReduce(absl::MakeSpan(got), op).ok());
      SCOPED_TRACE("AllReduce");
      ExpectSameSums(want, got, w);
    }
    {
      std::vector<float> want = Values(r, n, 2), got = want;
      ASSERT_TRUE(plain.Broadcast(absl::MakeSpan(want), w - 1).ok());
      ASSERT_TRUE(staged.Broadcast(absl::MakeSpan(got), w - 1).ok());
      EXPECT_EQ(want, got) << "Broadcast";
      std::vector<char> bytes_want(n * 3 + 1, static_cast<char>(r + 1));
      std::vector<char> bytes_got = bytes_want;
      ASSERT_TRUE(plain.BroadcastBytes(absl::MakeSpan(bytes_want), 0).ok());
      ASSERT_TRUE(staged.BroadcastBytes(absl::MakeSpan(bytes_got), 0).ok());
      EXPECT_EQ(bytes_want, bytes_got) << "BroadcastBytes";
    }
    {
      const std::vector<float> mine = Values(r, n, 3);
      std::vector<float> want(n * w), got(n * w);
      ASSERT_TRUE(plain.AllGather(mine, absl::MakeSpan(want)).ok());
      ASSERT_TRUE(staged.AllGather(mine, absl::MakeSpan(got)).ok());
      EXPECT_EQ(want, got) << "AllGather";
      const std::vector<char> bytes(n + 2, static_cast<char>(r + 5));
      std::vector<char> gathered_want(r == 1 ? (n + 2) * w : 0);
      std::vector<char> gathered_got = gathered_want;
      ASSERT_TRUE(
          plain.GatherBytes(bytes, absl::MakeSpan(gathered_want), 1).ok());
      ASSERT_TRUE(
          staged.GatherBytes(bytes, absl::MakeSpan(gathered_got), 1).ok());
      EXPECT_EQ(gathered_want, gathered_got) << "GatherBytes";
    }
    {
      const std::vector<float> input = Values(r, n * w, 4);
      std::vector<float> want(n), got(n);
      ASSERT_TRUE(
          plain.ReduceScatter(input, absl::MakeSpan(want), ReduceOp::kSum)
              .ok());
      ASSERT_TRUE(
          staged.ReduceScatter(input, absl::MakeSpan(got), ReduceOp::kSum)
              .ok());
      SCOPED_TRACE("ReduceScatter");
      ExpectSameSums(want, got, w);
    }
    // Uneven blocks, one of them empty.
    std::vector<size_t> counts;
    size_t total = 0;
    for (int b = 0; b < w; ++b) {
      counts.push_back(b == 1 ? 0 : n + 13 * b);
      total += counts.back();
    }
    {
      std::vector<float> want = Values(r, total, 5), got = want;
      ASSERT_TRUE(plain
                      .ReduceScatterBlocks(absl::MakeSpan(want), counts,
                                           ReduceOp::kAverage)
                      .ok());
      ASSERT_TRUE(staged
                      .ReduceScatterBlocks(absl::MakeSpan(got), counts,
                                           ReduceOp::kAverage)
                      .ok());
      size_t mine = 0;
      for (int b = 0; b < r; ++b) mine += counts[b];
      // Only this rank's block is defined afterwards.
      SCOPED_TRACE("ReduceScatterBlocks");
      ExpectSameSums(std::vector<float>(want.begin() + mine,
                                        want.begin() + mine + counts[r]),
                     std::vector<float>(got.begin() + mine,
                                        got.begin() + mine + counts[r]),
                     w);
    }
    {
      std::vector<char> want(total + w), got;
      for (size_t e = 0; e < want.size(); ++e)
        want[e] = static_cast<char>(e * (r + 3));
      got = want;
      std::vector<size_t> byte_counts = counts;
      for (size_t& count : byte_counts) ++count;
      ASSERT_TRUE(
          plain.AllGatherBlocks(absl::MakeSpan(want), byte_counts).ok());
      ASSERT_TRUE(
          staged.AllGatherBlocks(absl::MakeSpan(got), byte_counts).ok());
      EXPECT_EQ(want, got) << "AllGatherBlocks";
    }
    {
      // Segments: two per rank, uneven, the last rank's empty.
      std::vector<std::vector<float>> want(2 * w), got;
      for (int b = 0; b < 2 * w; ++b) {
        want[b] = b / 2 == r ? Values(r, b / 2 == w - 1 ? 0 : n + b, 6)
                             : std::vector<float>(b / 2 == w - 1 ? 0 : n + b);
      }
      got = want;
      auto blocks = [&](std::vector<std::vector<float>>& segments) {
        std::vector<std::vector<absl::Span<char>>> blocks(w);
        for (int b = 0; b < 2 * w; ++b) {
          blocks[b / 2].push_back(AsBytes(absl::MakeSpan(segments[b])));
        }
        return blocks;
      };
      ASSERT_TRUE(plain.AllGatherSegments(blocks(want)).ok());
      ASSERT_TRUE(staged.AllGatherSegments(blocks(got)).ok());
      EXPECT_EQ(want, got) << "AllGatherSegments";
    }
  }
  EXPECT_TRUE(staged.Barrier().ok());
}

TEST(StagedCommunicatorTest, EveryCollectiveEqualsGloosOwnAtEveryChunkSize) {
  for (int world : {2, 3}) {
    // The smallest staging (one float per rank), chunks that cut the
    // arrays unevenly, and the default (one chunk).
    for (size_t chunk : {size_t{4} * (world + 1), size_t{100}, size_t{1} << 12,
                         kDefaultStagingChunkBytes}) {
      SCOPED_TRACE(absl::StrCat("world ", world, ", chunk ", chunk));
      OnGlooRanks(world, [&](Communicator& plain) {
        auto device = std::make_shared<WatchedBackend>();
        std::unique_ptr<Communicator> staged =
            CreateStagedCommunicator(&plain, device, chunk);
        EXPECT_EQ(staged->rank(), plain.rank());
        EXPECT_EQ(staged->size(), plain.size());
        // The smallest chunks only over short arrays (a collective each).
        ExpectSameAsGloo(plain, *staged,
                         chunk < 64 ? std::vector<size_t>{0, 1, 7, 33}
                                    : std::vector<size_t>{0, 1, 7, 1000, 4099});
        // Two staging buffers of one chunk each, kept from call to call.
        EXPECT_LE(device->largest_staging.load(), chunk);
        EXPECT_LE(device->staged_bytes.load(),
                  2 * device->largest_staging.load());
      });
    }
  }
}

TEST(StagedCommunicatorTest, AFailedCopyIsThisRanksErrorAndItsPeersFinish) {
  OnGlooRanks(3, [&](Communicator& plain) {
    auto device = std::make_shared<WatchedBackend>();
    // Rank 1's third copy to the host fails, in the middle of the chunks.
    if (plain.rank() == 1) device->fail_copy_to_host = 3;
    std::unique_ptr<Communicator> staged =
        CreateStagedCommunicator(&plain, device, 64);
    std::vector<float> values(100, 1.0f);
    const absl::Status status =
        staged->AllReduce(absl::MakeSpan(values), ReduceOp::kSum);
    if (plain.rank() == 1) {
      EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
      EXPECT_NE(status.message().find("device-to-host copy failed"),
                std::string::npos)
          << status;
      // The caller's round is broken, as by a lost peer.
      EXPECT_TRUE(IsCollectiveFailure(status));
    } else {
      // Every chunk's collective ran (no timeout); from the failed copy on,
      // rank 1's chunks counted as zeros.
      EXPECT_TRUE(status.ok()) << status;
      EXPECT_EQ(values.front(), 3.0f);
      EXPECT_EQ(values.back(), 2.0f);
    }
    // The group is still usable.
    EXPECT_TRUE(staged->Barrier().ok());
  });
}

}  // namespace
}  // namespace distopt
