// Three gloo ranks in one process, over loopback TCP, bootstrapped through
// one key-value store; and a rank whose peer never comes.
#include "server/comm/gloo_communicator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gloo/transport/tcp/address.h"
#include "gloo/transport/tcp/pair.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/comm/testing/counting_communicator.h"
#include "server/comm/testing/gloo_test_ranks.h"

namespace distopt {
namespace {

using ::distopt::testing::CountingCommunicator;
using ::testing::Each;
using ::testing::ElementsAre;

TEST(GlooCommunicatorTest, AllReduceBroadcastAllGatherBarrier) {
  OnGlooRanks(3, [](Communicator& c) {
    std::vector<float> values(1000, static_cast<float>(c.rank() + 1));
    ASSERT_TRUE(c.AllReduce(absl::MakeSpan(values), ReduceOp::kSum).ok());
    EXPECT_THAT(values, Each(6.0f));  // 1 + 2 + 3.
    ASSERT_TRUE(c.AllReduce(absl::MakeSpan(values), ReduceOp::kAverage).ok());
    EXPECT_THAT(values, Each(6.0f));

    std::vector<float> broadcast = {static_cast<float>(c.rank()), 7.0f};
    ASSERT_TRUE(c.Broadcast(absl::MakeSpan(broadcast), /*root=*/1).ok());
    EXPECT_THAT(broadcast, ElementsAre(1.0f, 7.0f));

    const std::vector<float> mine = {static_cast<float>(c.rank()),
                                     static_cast<float>(10 * c.rank())};
    std::vector<float> everyone(6);
    ASSERT_TRUE(c.AllGather(mine, absl::MakeSpan(everyone)).ok());
    EXPECT_THAT(everyone, ElementsAre(0, 0, 1, 10, 2, 20));
    std::vector<float> scattered(2);
    const std::vector<float> blocks = {1, 2, 3, 4, 5, 6};
    ASSERT_TRUE(
        c.ReduceScatter(blocks, absl::MakeSpan(scattered), ReduceOp::kSum)
            .ok());
    EXPECT_THAT(scattered, ElementsAre(3 * blocks[2 * c.rank()],
                                       3 * blocks[2 * c.rank() + 1]));
    EXPECT_TRUE(c.Barrier().ok());
    EXPECT_EQ(c.Broadcast(absl::MakeSpan(broadcast), 5).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

// An all-reduce of 1 MiB or more takes the ring (reduce-scatter then
// all-gather, equal blocks but for one element): the same sums as gloo's
// own all-reduce, every rank with the same bits, for a size that W does not
// divide; and the average.
TEST(GlooCommunicatorTest, LargeAllReducesTakeTheRingAndMatchGloosOwn) {
  const size_t elements = (1 << 20) / sizeof(float) * 3 + 2;
  for (int world : {2, 3}) {
    OnGlooRanks(world, [&](Communicator& c) {
      std::vector<float> values(elements);
      for (size_t e = 0; e < elements; ++e) {
        values[e] = static_cast<float>((e * 5 + c.rank() * 11) % 32) / 4.0f;
      }
      std::vector<float> averaged = values;
      ASSERT_TRUE(c.AllReduce(absl::MakeSpan(values), ReduceOp::kSum).ok());
      ASSERT_TRUE(
          c.AllReduce(absl::MakeSpan(averaged), ReduceOp::kAverage).ok());
      for (size_t e = 0; e < elements; ++e) {
        float sum = 0;
        for (int r = 0; r < c.size(); ++r) {
          sum += static_cast<float>((e * 5 + r * 11) % 32) / 4.0f;
        }
        ASSERT_EQ(values[e], sum) << "world " << world << " element " << e;
        ASSERT_EQ(averaged[e], sum * (1.0f / c.size())) << e;
      }
    });
  }
}

// The ring reduce-scatter over blocks of any size (empty ones too): each
// rank's own block ends with the exact sum over ranks, or the average
// (averaged as the last sums arrive, chunk by chunk), for 2 to 5 ranks.
// The last two cases send blocks in several chunks (1 MiB each): of
// exactly two chunks, of two and a bit, and below one.
TEST(GlooCommunicatorTest, ReduceScatterBlocksSumsEachRanksBlock) {
  constexpr size_t kChunk = (1 << 20) / sizeof(float);
  std::vector<std::vector<size_t>> cases;
  for (int world = 2; world <= 5; ++world) {
    cases.emplace_back();
    for (int r = 0; r < world; ++r) {
      cases.back().push_back(r == 1 ? 0 : 1000 + 37 * r);
    }
  }
  cases.push_back({2 * kChunk, 2 * kChunk + 5, 0});
  cases.push_back({2 * kChunk + 5, 1, 2 * kChunk, kChunk - 1});
  for (const std::vector<size_t>& counts : cases) {
    const int world = static_cast<int>(counts.size());
    size_t total = 0;
    for (size_t count : counts) total += count;
    OnGlooRanks(world, [&](Communicator& c) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        std::vector<float> values(total);
        for (size_t e = 0; e < total; ++e) {
          values[e] = static_cast<float>((e * 7 + c.rank() * 13) % 64) / 8.0f;
        }
        ASSERT_TRUE(
            c.ReduceScatterBlocks(absl::MakeSpan(values), counts, op).ok());
        size_t begin = 0;
        for (int r = 0; r < c.rank(); ++r) begin += counts[r];
        for (size_t e = begin; e < begin + counts[c.rank()]; ++e) {
          float sum = 0;
          for (int r = 0; r < c.size(); ++r) {
            sum += static_cast<float>((e * 7 + r * 13) % 64) / 8.0f;
          }
          const float expected =
              op == ReduceOp::kSum ? sum : sum * (1.0f / c.size());
          ASSERT_EQ(values[e], expected)
              << "world " << world << " element " << e << " average "
              << (op == ReduceOp::kAverage);
        }
      }
    });
  }
}

// The same ring over spans that stay where they are: each rank's block
// comes out bit for bit as ReduceScatterBlocks makes it from the same
// values packed (the same additions in the same order), sums and averages,
// for 1 to 4 ranks; blocks of several spans, of none, spans of no values
// and the last block's many small spans and one large: half a chunk, one
// and a half, or two and a bit (1 MiB each). The inputs are only read.
// Handed over piece by piece, the block comes in order, in pieces of a
// chunk at most, with the same values, on a thread beside the ring's, also
// when the consumer is slow: its pieces pass through two, three or four
// chunks (as the large span makes it), each taken by several pieces.
TEST(GlooCommunicatorTest, ReduceScatterSegmentsMatchesThePackedRing) {
  constexpr size_t kChunk = (1 << 20) / sizeof(float);
  for (int world = 1; world <= 4; ++world) {
    for (size_t large :
         {kChunk / 2 + 11, kChunk + kChunk / 2 + 7, 2 * kChunk + 3}) {
      // Span sizes per block.
      std::vector<std::vector<size_t>> sizes(world);
      for (int b = 0; b < world; ++b) {
        if (b == 1 && b != world - 1) continue;  // A block with no spans.
        sizes[b] = {300 + 17 * static_cast<size_t>(b), 0, 5};
        if (b == world - 1) {
          sizes[b].insert(sizes[b].end(), 12, 100);
          sizes[b].push_back(large);
        }
      }
      SCOPED_TRACE(absl::StrCat("world ", world, " large span ", large));
      OnGlooRanks(world, [&](Communicator& c) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
          std::vector<std::vector<std::vector<float>>> memory(world);
          std::vector<std::vector<absl::Span<const float>>> inputs(world);
          std::vector<float> packed;
          std::vector<size_t> counts(world, 0);
          for (int b = 0; b < world; ++b) {
            for (size_t size : sizes[b]) {
              std::vector<float> span(size);
              for (size_t e = 0; e < size; ++e) {
                span[e] = std::sin(0.37f * static_cast<float>(packed.size()) +
                                   static_cast<float>(c.rank()));
                packed.push_back(span[e]);
              }
              counts[b] += size;
              memory[b].push_back(std::move(span));
            }
            for (const std::vector<float>& span : memory[b]) {
              inputs[b].push_back(absl::MakeConstSpan(span));
            }
          }
          const std::vector<float> original = packed;
          std::vector<float> output(counts[c.rank()], -1.0f);
          ASSERT_TRUE(
              c.ReduceScatterSegments(inputs, absl::MakeSpan(output), op).ok());
          std::vector<float> pieces;
          size_t largest_piece = 0;
          const std::thread::id caller = std::this_thread::get_id();
          ASSERT_TRUE(
              c.ReduceScatterSegmentsPiecewise(
                   inputs, op,
                   [&](size_t at, absl::Span<const float> values) {
                     // Beside the ring, which goes on meanwhile (one rank
                     // has no ring: its own values, on the caller's thread).
                     EXPECT_EQ(std::this_thread::get_id() == caller,
                               world == 1);
                     // A chunk must not take the next pieces before its
                     // consumer is done with it: the last rank (whose block
                     // comes in the most pieces) reads late.
                     if (c.rank() == world - 1) {
                       absl::SleepFor(absl::Milliseconds(2));
                     }
                     EXPECT_EQ(at, pieces.size());
                     largest_piece = std::max(largest_piece, values.size());
                     pieces.insert(pieces.end(), values.begin(), values.end());
                   })
                  .ok());
          EXPECT_LE(largest_piece, kChunk);
          ASSERT_EQ(pieces.size(), output.size());
          for (size_t e = 0; e < output.size(); ++e) {
            ASSERT_EQ(pieces[e], output[e])
                << "world " << world << " element " << e;
          }
          ASSERT_TRUE(
              c.ReduceScatterBlocks(absl::MakeSpan(packed), counts, op).ok());
          size_t begin = 0;
          for (int r = 0; r < c.rank(); ++r) begin += counts[r];
          for (size_t e = 0; e < output.size(); ++e) {
            ASSERT_EQ(output[e], packed[begin + e])
                << "world " << world << " element " << e << " average "
                << (op == ReduceOp::kAverage);
          }
          size_t e = 0;
          for (int b = 0; b < world; ++b) {
            for (const std::vector<float>& span : memory[b]) {
              for (float value : span) ASSERT_EQ(value, original[e++]);
            }
          }
        }
      });
    }
  }
}

// The default (a communicator without a ring of its own) packs the spans
// around ReduceScatterBlocks: the same block, handed over piecewise in one
// piece.
TEST(GlooCommunicatorTest, ReduceScatterSegmentsDefaultPacks) {
  OnGlooRanks(3, [&](Communicator& gloo) {
    CountingCommunicator c(gloo);
    std::vector<float> a(7, 1.0f + c.rank()), b(5, 2.0f), d(4, 3.0f);
    const std::vector<std::vector<absl::Span<const float>>> inputs = {
        {absl::MakeConstSpan(a)},
        {absl::MakeConstSpan(b)},
        {absl::MakeConstSpan(d)}};
    std::vector<float> output(inputs[c.rank()][0].size());
    ASSERT_TRUE(c.Communicator::ReduceScatterSegments(
                     inputs, absl::MakeSpan(output), ReduceOp::kSum)
                    .ok());
    const float expected[] = {1.0f + 2.0f + 3.0f, 6.0f, 9.0f};
    EXPECT_THAT(output, Each(expected[c.rank()]));
    // Through the packed ring.
    EXPECT_EQ(c.reduce_scatter_bytes, 16 * sizeof(float));
    int pieces = 0;
    ASSERT_TRUE(c.Communicator::ReduceScatterSegmentsPiecewise(
                     inputs, ReduceOp::kSum,
                     [&](size_t at, absl::Span<const float> values) {
                       ++pieces;
                       EXPECT_EQ(at, 0u);
                       EXPECT_THAT(values, Each(expected[c.rank()]));
                       EXPECT_EQ(values.size(), output.size());
                     })
                    .ok());
    EXPECT_EQ(pieces, 1);
    EXPECT_EQ(c.reduce_scatter_bytes, 2 * 16 * sizeof(float));
    // Its packing buffer, kept for the next call.
    EXPECT_GE(c.Communicator::kept_bytes(),
              static_cast<int64_t>(16 * sizeof(float)));
  });
}

// What the ring reduce-scatter keeps between calls counts in kept_bytes
// (and so in a ZeRO rank's scratch bytes): the two chunks that values
// arrive in, each as large as the largest block up to 1 MiB; handing
// pieces on, up to four such chunks, two blocks' worth at most. Grown from
// call to call, it is what the largest call took, not a doubled vector's
// capacity.
TEST(GlooCommunicatorTest, KeptBytesCountTheRingsChunks) {
  OnGlooRanks(2, [&](Communicator& c) {
    EXPECT_EQ(c.kept_bytes(), 0);
    std::vector<float> values(2 * 10000, 1.0f);
    ASSERT_TRUE(c.ReduceScatterBlocks(absl::MakeSpan(values), {10000, 10000},
                                      ReduceOp::kSum)
                    .ok());
    const int64_t chunks = 2 * 10000 * sizeof(float);
    EXPECT_GE(c.kept_bytes(), chunks);
    EXPECT_LT(c.kept_bytes(), 2 * chunks);
    constexpr size_t kChunk = (1 << 20) / sizeof(float);
    // Blocks of one and a half chunks (three chunks), then of three (four).
    for (size_t block : {kChunk + kChunk / 2, 3 * kChunk}) {
      std::vector<float> a(block, 1.0f), b(block, 2.0f);
      const std::vector<std::vector<absl::Span<const float>>> inputs = {
          {absl::MakeConstSpan(a)}, {absl::MakeConstSpan(b)}};
      ASSERT_TRUE(
          c.ReduceScatterSegmentsPiecewise(
               inputs, ReduceOp::kSum, [](size_t, absl::Span<const float>) {})
              .ok());
      const int64_t expected =
          (block < 2 * kChunk ? 3 : 4) * kChunk * sizeof(float);
      EXPECT_EQ(c.kept_bytes(), expected) << block;
    }
  });
}

// How many of this process's threads run under `policy`.
int ThreadsUnder(int policy) {
  int count = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/self/task")) {
    const pid_t thread = std::stoi(entry.path().filename().string());
    if (sched_getscheduler(thread) == policy) ++count;  // -1 once gone.
  }
  return count;
}

// gloo's device threads (one per rank's communicator here) run under
// SCHED_BATCH, so that one never preempts a collective's thread that holds
// a pair's lock it then spins on (gloo_device.cc); the threads that made
// the communicators are back under the default policy.
TEST(GlooCommunicatorTest, DeviceThreadsDoNotPreemptTheCollectives) {
  ASSERT_EQ(sched_getscheduler(0), SCHED_OTHER);
  OnGlooRanks(3, [](Communicator& c) {
    EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER) << c.rank();
    ASSERT_TRUE(c.Barrier().ok());  // Every rank's communicator is made.
    if (c.rank() == 0) {
      EXPECT_GE(ThreadsUnder(SCHED_BATCH), 3);
    }
    ASSERT_TRUE(c.Barrier().ok());  // And kept until counted.
  });
}

// A ring step whose peer does not take part is bounded by the timeout the
// communicator was given for it.
TEST(GlooCommunicatorTest, ARingCollectiveKeepsToItsTimeout) {
  OnGlooRanks(2, [](Communicator& c) {
    c.SetTimeout(absl::Milliseconds(300));
    if (c.rank() == 1) {  // Alive, but never takes part.
      absl::SleepFor(absl::Seconds(1));
      return;
    }
    std::vector<float> values(10, 1.0f);
    const absl::Time start = absl::Now();
    absl::Status status =
        c.ReduceScatterBlocks(absl::MakeSpan(values), {5, 5}, ReduceOp::kSum);
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_TRUE(IsCollectiveFailure(status));
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  });
}

TEST(GlooCommunicatorTest, AllGatherBlocksGivesEveryRankEveryBlock) {
  const std::vector<size_t> counts = {5, 0, 3, 11};
  OnGlooRanks(4, [&](Communicator& c) {
    std::string bytes(19, '?');
    size_t begin = 0;
    for (int r = 0; r < c.rank(); ++r) begin += counts[r];
    for (size_t e = 0; e < counts[c.rank()]; ++e) {
      bytes[begin + e] = static_cast<char>('a' + c.rank());
    }
    ASSERT_TRUE(c.AllGatherBlocks(absl::MakeSpan(bytes), counts).ok());
    EXPECT_EQ(bytes, "aaaaacccddddddddddd");
    // The counts must fit the buffer, one per rank.
    EXPECT_EQ(c.AllGatherBlocks(absl::MakeSpan(bytes), {19}).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

// Block r in pieces of its own memory (one empty): every rank ends with
// every piece, through gloo's ring over the pieces (large ones), packed
// into one buffer (small ones), and through the default that packs.
TEST(GlooCommunicatorTest, AllGatherSegmentsFillsEveryRanksPieces) {
  for (size_t scale : {size_t{1}, size_t{300} << 10}) {
    for (bool base_default : {false, true}) {
      OnGlooRanks(3, [&](Communicator& c) {
        // Rank r's block: pieces of 2, 0 and r + 1 times `scale` bytes.
        std::vector<std::vector<std::string>> pieces(3);
        for (int r = 0; r < 3; ++r) {
          const char mark = static_cast<char>(r == c.rank() ? 'a' + r : '?');
          pieces[r] = {std::string(2 * scale, mark), "",
                       std::string((r + 1) * scale, mark)};
        }
        std::vector<std::vector<absl::Span<char>>> blocks(3);
        for (int r = 0; r < 3; ++r) {
          for (std::string& piece : pieces[r]) {
            blocks[r].push_back(absl::MakeSpan(piece));
          }
        }
        absl::Status gathered = base_default
                                    ? c.Communicator::AllGatherSegments(blocks)
                                    : c.AllGatherSegments(blocks);
        ASSERT_TRUE(gathered.ok()) << gathered;
        for (int r = 0; r < 3; ++r) {
          const char mark = static_cast<char>('a' + r);
          EXPECT_EQ(pieces[r][0], std::string(2 * scale, mark))
              << scale << " " << base_default;
          EXPECT_EQ(pieces[r][2], std::string((r + 1) * scale, mark))
              << scale << " " << base_default;
        }
        blocks.pop_back();  // One block per rank.
        EXPECT_EQ(c.AllGatherSegments(blocks).code(),
                  absl::StatusCode::kInvalidArgument);
      });
    }
  }
}

TEST(GlooCommunicatorTest, BytesBroadcastAndGatherToOneRoot) {
  OnGlooRanks(3, [](Communicator& c) {
    std::string bytes = c.rank() == 2 ? "from two" : "????????";
    ASSERT_TRUE(c.BroadcastBytes(absl::MakeSpan(bytes), /*root=*/2).ok());
    EXPECT_EQ(bytes, "from two");

    const std::string mine = absl::StrCat("rank", c.rank());
    std::string gathered(c.rank() == 1 ? 3 * mine.size() : 0, '-');
    ASSERT_TRUE(c.GatherBytes(mine, absl::MakeSpan(gathered), /*root=*/1).ok());
    EXPECT_EQ(gathered, c.rank() == 1 ? "rank0rank1rank2" : "");
    std::string too_small(2, ' ');
    EXPECT_EQ(c.GatherBytes(mine, absl::MakeSpan(too_small), c.rank()).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

TEST(GlooCommunicatorTest, AMissingPeerIsADeadlineNotAHang) {
  KeyValueStore store;
  LocalRendezvousStore rendezvous(&store);
  GlooOptions options;
  options.rank = 0;
  options.size = 2;  // Rank 1 never comes.
  options.timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      CreateGlooCommunicator(options, &rendezvous);
  EXPECT_FALSE(communicator.ok());
  EXPECT_EQ(communicator.status().code(), absl::StatusCode::kDeadlineExceeded)
      << communicator.status();
  // The whole wait, not the store's last slice of it.
  EXPECT_THAT(communicator.status().message(),
              ::testing::HasSubstr("waited 1s in all"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
}

TEST(GlooCommunicatorTest, APeerThatDiesIsAnErrorOnTheSurvivor) {
  KeyValueStore store;
  LocalRendezvousStore rendezvous(&store);
  absl::Status survivor;
  absl::Duration took;
  std::thread dying([&] {
    GlooOptions options;
    options.rank = 1;
    options.size = 2;
    options.timeout = absl::Seconds(3);
    // Joins, then goes away without taking part in the all-reduce: once
    // the survivor has made its communicator too (going away before that
    // fails the survivor's connecting, not its all-reduce).
    absl::StatusOr<std::unique_ptr<Communicator>> joined =
        CreateGlooCommunicator(options, &rendezvous);
    EXPECT_TRUE(joined.ok()) << joined.status();
    EXPECT_TRUE(rendezvous.Get("survivor_made", absl::Seconds(10)).ok());
  });
  GlooOptions options;
  options.rank = 0;
  options.size = 2;
  options.timeout = absl::Seconds(3);
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      CreateGlooCommunicator(options, &rendezvous);
  EXPECT_TRUE(rendezvous.Set("survivor_made", "1").ok());
  dying.join();
  ASSERT_TRUE(communicator.ok()) << communicator.status();
  std::vector<float> values(100, 1.0f);
  const absl::Time start = absl::Now();
  survivor = (*communicator)->AllReduce(absl::MakeSpan(values), ReduceOp::kSum);
  took = absl::Now() - start;
  EXPECT_FALSE(survivor.ok());
  EXPECT_LT(took, absl::Seconds(15)) << survivor;
}

// A TCP socket bound to a free loopback port; -1 on failure.
int LoopbackSocket() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in loopback = {};
  loopback.sin_family = AF_INET;
  loopback.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&loopback), sizeof(loopback)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Connects to `address` and resets the connection at once (a close that
// lingers 0 s), as a port scanner or a peer whose rendezvous failed does.
bool ConnectAndReset(const sockaddr_storage& address) {
  const int stranger = socket(address.ss_family, SOCK_STREAM, 0);
  if (stranger < 0) return false;
  const bool connected =
      connect(stranger, reinterpret_cast<const sockaddr*>(&address),
              address.ss_family == AF_INET6 ? sizeof(sockaddr_in6)
                                            : sizeof(sockaddr_in)) == 0;
  const linger reset = {1, 0};
  setsockopt(stranger, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  close(stranger);
  return connected;
}

// Rank 0 of a group of two whose rank 1 never comes: it creates its
// communicator on a thread of its own, and waits for rank 1 there.
class LoneRankZero {
 public:
  explicit LoneRankZero(absl::Duration timeout) : rendezvous_(&store_) {
    options_.rank = 0;
    options_.size = 2;
    options_.timeout = timeout;
    thread_ = std::thread([this] {
      joined_ = CreateGlooCommunicator(options_, &rendezvous_).status();
    });
  }
  ~LoneRankZero() {
    if (thread_.joinable()) thread_.join();
  }

  // Where its pair listens for rank 1: published before it waits.
  absl::StatusOr<sockaddr_storage> PairAddress() {
    absl::StatusOr<std::string> addresses =
        rendezvous_.Get(options_.prefix + "/0", absl::Seconds(5));
    if (!addresses.ok()) return addresses.status();
    return gloo::transport::tcp::Address(
               std::vector<char>(addresses->begin(), addresses->end()))
        .getSockaddr();
  }

  // What creating the communicator came to.
  absl::Status Join() {
    thread_.join();
    return joined_;
  }

 private:
  KeyValueStore store_;
  LocalRendezvousStore rendezvous_;
  GlooOptions options_;
  absl::Status joined_;
  std::thread thread_;
};

// Anyone who reaches a rank's pair port while it waits for its peer, and
// resets the connection at once (a port scanner, a peer whose rendezvous
// was just cancelled), must not take the daemon down: gloo aborts the
// process when the connection it accepts is gone before it asks its
// address (gloo_socket_addresses.cc).
TEST(GlooCommunicatorTest, AConnectionResetBeforeItIsAcceptedIsNotACrash) {
  for (int round = 0; round < 5; ++round) {
    LoneRankZero rank0(absl::Seconds(1));  // A stranger comes instead.
    absl::StatusOr<sockaddr_storage> address = rank0.PairAddress();
    EXPECT_TRUE(address.ok()) << address.status();
    if (address.ok()) {
      EXPECT_TRUE(ConnectAndReset(*address)) << strerror(errno);
    }
    // Rank 1 never came.
    EXPECT_FALSE(rank0.Join().ok());
  }
}

// The same, deterministic: the connection is reset before it is accepted,
// and gloo asks for the peer's address.
TEST(GlooCommunicatorTest, AConnectionResetBeforeItIsAcceptedHasNoPeerAddress) {
  const int listener = LoopbackSocket();
  ASSERT_GE(listener, 0);
  ASSERT_EQ(listen(listener, 4), 0);
  sockaddr_storage address = {};
  socklen_t length = sizeof(address);
  ASSERT_EQ(
      getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ASSERT_TRUE(ConnectAndReset(address)) << strerror(errno);
  const int accepted = accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  std::string peer;
  EXPECT_NO_THROW(
      peer = gloo::transport::tcp::Address::fromPeerName(accepted).str());
  EXPECT_EQ(peer, "[none]");
  close(accepted);
  close(listener);
}

// Anyone who reaches a rank's pair port while it waits for its peer is
// taken as the peer, and what it sends is read as gloo's messages: one for
// a receive this rank never posted fails a check on gloo's device thread,
// which ended the process (gloo_pair_guard.cc). It must fail the pair
// instead: the rank's rendezvous then fails (its peer never came) and the
// process goes on.
TEST(GlooCommunicatorTest, AStrangersMessageForNoReceiveIsNotACrash) {
  LoneRankZero rank0(absl::Seconds(2));  // A stranger comes instead.
  absl::StatusOr<sockaddr_storage> address = rank0.PairAddress();
  ASSERT_TRUE(address.ok()) << address.status();
  const int stranger = socket(address->ss_family, SOCK_STREAM, 0);
  ASSERT_GE(stranger, 0);
  ASSERT_EQ(connect(stranger, reinterpret_cast<const sockaddr*>(&*address),
                    address->ss_family == AF_INET6 ? sizeof(sockaddr_in6)
                                                   : sizeof(sockaddr_in)),
            0)
      << strerror(errno);
  // A payload for an unbound buffer (gloo's opcode 1) in a slot this rank
  // has no receive in: the preamble's six words, then the bytes.
  gloo::transport::tcp::Op message;
  message.preamble.opcode = gloo::transport::tcp::Op::SEND_UNBOUND_BUFFER;
  message.preamble.slot = 0x7777;
  message.preamble.length = 8;
  message.preamble.nbytes = sizeof(message.preamble) + 8;
  std::string bytes(reinterpret_cast<const char*>(&message.preamble),
                    sizeof(message.preamble));
  bytes.append(8, 'x');
  EXPECT_EQ(write(stranger, bytes.data(), bytes.size()),
            static_cast<ssize_t>(bytes.size()));
  // The pair failed at once: it closed its connection, a second before the
  // rendezvous gives up on rank 1 (and would close it anyway).
  const timeval wait = {1, 0};
  setsockopt(stranger, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  char reply;
  const ssize_t got = recv(stranger, &reply, 1, 0);
  const int error = errno;
  EXPECT_TRUE(got == 0 || (got < 0 && error == ECONNRESET))
      << "recv: " << got << " " << strerror(error);
  close(stranger);
  // Rank 1 never came; this process is still here to say so.
  EXPECT_FALSE(rank0.Join().ok());
}

// Leaves `byte` in the stack below its caller's frame, where the next
// call's locals will be.
__attribute__((noinline)) void DirtyTheStack(unsigned char byte) {
  volatile unsigned char used[4096];
  for (size_t i = 0; i < sizeof(used); ++i) used[i] = byte;
}

// What a rank publishes in the store for each pair is its listening
// address and nothing else: the bytes of the sockaddr_storage past the
// address are zeros, not whatever the stack held (pointers, the stack
// protector's canary).
TEST(GlooCommunicatorTest, APairsPublishedAddressHoldsNothingElse) {
  const int listener = LoopbackSocket();
  ASSERT_GE(listener, 0);
  DirtyTheStack(0xa5);
  const std::vector<char> bytes =
      gloo::transport::tcp::Address::fromSockName(listener).bytes();
  close(listener);
  // sockaddr_storage, then the sequence number.
  ASSERT_GE(bytes.size(), sizeof(sockaddr_storage));
  for (size_t i = sizeof(sockaddr_in); i < sizeof(sockaddr_storage); ++i) {
    EXPECT_EQ(bytes[i], 0) << "byte " << i;
  }
}

TEST(GlooCommunicatorTest, SubgroupsAreContiguousBlocks) {
  KeyValueStore store;
  LocalRendezvousStore rendezvous(&store);
  std::vector<std::thread> ranks;
  std::vector<float> results(4);
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([&, r] {
      GlooOptions group;
      group.rank = r;
      group.size = 4;
      group.timeout = absl::Seconds(20);
      absl::StatusOr<std::unique_ptr<Communicator>> sub =
          CreateGlooSubgroup(group, {2}, &rendezvous);
      ASSERT_TRUE(sub.ok()) << sub.status();
      EXPECT_EQ((*sub)->size(), 2);
      EXPECT_EQ((*sub)->rank(), r % 2);
      std::vector<float> value = {static_cast<float>(r)};
      ASSERT_TRUE(
          (*sub)->AllReduce(absl::MakeSpan(value), ReduceOp::kSum).ok());
      results[r] = value[0];
    });
  }
  for (std::thread& rank : ranks) rank.join();
  // Blocks {0, 1} and {2, 3}.
  EXPECT_THAT(results, ElementsAre(1, 1, 5, 5));
  GlooOptions group;
  group.size = 4;
  EXPECT_EQ(CreateGlooSubgroup(group, {3}, &rendezvous).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GlooCommunicatorTest, BadRankIsRefused) {
  KeyValueStore store;
  LocalRendezvousStore rendezvous(&store);
  GlooOptions options;
  options.rank = 2;
  options.size = 2;
  EXPECT_EQ(CreateGlooCommunicator(options, &rendezvous).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace distopt
