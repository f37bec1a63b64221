// The NCCL communicator. Without a GPU (or without NCCL in the build) its
// creation is a clear FAILED_PRECONDITION; on one GPU every collective runs
// at world size 1; with two GPUs, two ranks (threads, one per device) sum,
// broadcast, reduce-scatter and gather blocks of one or two sizes, and a
// rank that stops taking part is a DEADLINE_EXCEEDED on the other within
// the timeout, not a hang.
#include "server/comm/nccl_communicator.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/backend.h"
#include "common/cuda_ops.h"
#include "common/tensor.h"
#include "common/testing/cuda_stream_gate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

int GpuCount() {
  int count = 0;
  if (!cuda_ops::DeviceCount(&count).empty()) return 0;
  return count;
}

Tensor OnDevice(const std::vector<float>& values, int device) {
  Tensor host = *Tensor::AllocateHost(DType::kFloat32,
                                      {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), host.host_span<float>().begin());
  return *host.CloneTo(*GetBackend(Device::Cuda(device)));
}

std::vector<float> ToHost(const Tensor& tensor) {
  Tensor host = *tensor.CloneTo(*GetBackend(Device::Cpu()));
  return std::vector<float>(host.host_span<float>().begin(),
                            host.host_span<float>().end());
}

absl::Span<float> Floats(Tensor& tensor) {
  return absl::Span<float>(static_cast<float*>(tensor.data()),
                           tensor.num_elements());
}

// A communicator of one rank on cuda:0 (the store serves its creation only).
absl::StatusOr<std::unique_ptr<Communicator>> OnOneGpu() {
  KeyValueStore store;
  LocalRendezvousStore rendezvous(&store);
  return CreateNcclCommunicator(NcclOptions(), &rendezvous);
}

TEST(NcclCommunicatorTest, WithoutAGpuCreationIsAClearError) {
  if (NcclCompiledIn() && GpuCount() > 0) GTEST_SKIP() << "a GPU is present";
  KeyValueStore store;
  LocalRendezvousStore rendezvous(&store);
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      CreateNcclCommunicator(NcclOptions(), &rendezvous);
  EXPECT_EQ(communicator.status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(communicator.status().message(),
              NcclCompiledIn() ? HasSubstr("cuda:0") : HasSubstr("without"));
}

TEST(NcclCommunicatorTest, EveryCollectiveRunsOnOneGpu) {
  if (!NcclCompiledIn() || GpuCount() < 1) GTEST_SKIP() << "no CUDA GPU";
  auto communicator = OnOneGpu();
  ASSERT_TRUE(communicator.ok()) << communicator.status();
  Communicator& c = **communicator;
  Tensor values = OnDevice({1, 2, 3}, 0);
  ASSERT_TRUE(c.AllReduce(Floats(values), ReduceOp::kAverage).ok());
  EXPECT_THAT(ToHost(values), ElementsAre(1, 2, 3));
  ASSERT_TRUE(c.Broadcast(Floats(values), 0).ok());
  Tensor gathered = OnDevice({0, 0, 0}, 0);
  ASSERT_TRUE(c.AllGather(Floats(values), Floats(gathered)).ok());
  EXPECT_THAT(ToHost(gathered), ElementsAre(1, 2, 3));
  Tensor bytes = OnDevice({0, 0, 0}, 0);
  absl::Span<char> in(static_cast<char*>(values.data()), values.byte_size());
  absl::Span<char> out(static_cast<char*>(bytes.data()), bytes.byte_size());
  ASSERT_TRUE(c.GatherBytes(in, out, 0).ok());
  EXPECT_THAT(ToHost(bytes), ElementsAre(1, 2, 3));
  ASSERT_TRUE(c.ReduceScatterBlocks(Floats(values), {3}, ReduceOp::kSum).ok());
  EXPECT_THAT(ToHost(values), ElementsAre(1, 2, 3));
  EXPECT_EQ(c.ReduceScatterBlocks(Floats(values), {2}, ReduceOp::kSum).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.Barrier().ok());
  EXPECT_EQ(c.Broadcast(Floats(values), 3).code(),
            absl::StatusCode::kInvalidArgument);
}

// Ordered with the caller's work by an event: NCCL's stream waits for what
// the calling thread queued on its own stream before the collective (here
// a copy held behind a gate until after the call), so the collective reads
// the tensor once written; without the event it would gather the zeros.
TEST(NcclCommunicatorTest, ACollectiveReadsWhatItsCallerQueuedBeforeIt) {
  if (!NcclCompiledIn() || GpuCount() < 1) GTEST_SKIP() << "no CUDA GPU";
  auto communicator = OnOneGpu();
  ASSERT_TRUE(communicator.ok()) << communicator.status();
  Tensor input = OnDevice({0, 0, 0, 0}, 0);
  Tensor output = OnDevice({0, 0, 0, 0}, 0);
  void* staging = nullptr;
  ASSERT_EQ(cuda_ops::MallocHost(input.byte_size(), &staging), "");
  const float values[] = {1, 2, 3, 4};
  std::memcpy(staging, values, sizeof(values));
  {
    testing::CudaStreamGate gate;
    ASSERT_EQ(gate.HoldCallingThreadStream(0), "");
    ASSERT_EQ(testing::CudaStreamGate::QueueCopyToDevice(input.data(), staging,
                                                         input.byte_size()),
              "");
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      gate.Open();
    });
    const absl::Status gathered =
        (*communicator)->AllGather(Floats(input), Floats(output));
    opener.join();
    ASSERT_TRUE(gathered.ok()) << gathered;
  }
  EXPECT_THAT(ToHost(output), ElementsAre(1, 2, 3, 4));
  cuda_ops::FreeHost(staging);
}

TEST(NcclCommunicatorTest, TwoRanksOnTwoGpusAndALostRankTimesOut) {
  if (!NcclCompiledIn() || GpuCount() < 2) GTEST_SKIP() << "needs 2 GPUs";
  KeyValueStore store;
  LocalRendezvousStore rendezvous(&store);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      NcclOptions options;
      options.rank = r;
      options.size = 2;
      options.device = r;
      options.timeout = absl::Seconds(5);
      auto communicator = CreateNcclCommunicator(options, &rendezvous);
      ASSERT_TRUE(communicator.ok()) << communicator.status();
      Communicator& c = **communicator;
      Tensor values = OnDevice({1.0f + r, 10.0f}, r);
      ASSERT_TRUE(c.AllReduce(Floats(values), ReduceOp::kSum).ok());
      EXPECT_THAT(ToHost(values), ElementsAre(3, 20));
      Tensor mine = OnDevice({static_cast<float>(r)}, r);
      ASSERT_TRUE(c.Broadcast(Floats(mine), 1).ok());
      EXPECT_THAT(ToHost(mine), ElementsAre(1));
      // Blocks of one size (NCCL's reduce-scatter and all-gather) and of
      // two sizes (a reduce, then a broadcast, per block).
      for (const std::vector<size_t>& counts :
           {std::vector<size_t>{2, 2}, std::vector<size_t>{3, 1}}) {
        Tensor blocks = OnDevice({1.0f + r, 2, 3, 4}, r);
        ASSERT_TRUE(
            c.ReduceScatterBlocks(Floats(blocks), counts, ReduceOp::kSum).ok());
        std::vector<float> reduced = ToHost(blocks);
        const std::vector<float> sums = {3, 4, 6, 8};
        const size_t begin = r == 0 ? 0 : counts[0];
        for (size_t e = begin; e < begin + counts[r]; ++e) {
          EXPECT_EQ(reduced[e], sums[e]) << "rank " << r << " element " << e;
        }
        absl::Span<char> bytes(static_cast<char*>(blocks.data()),
                               blocks.byte_size());
        const std::vector<size_t> byte_counts = {4 * counts[0], 4 * counts[1]};
        ASSERT_TRUE(c.AllGatherBlocks(bytes, byte_counts).ok());
        EXPECT_THAT(ToHost(blocks), ElementsAre(3, 4, 6, 8));
      }
      if (r == 1) return;  // Rank 1 stops taking part.
      const absl::Time start = absl::Now();
      absl::Status lost = c.AllReduce(Floats(values), ReduceOp::kSum);
      EXPECT_EQ(lost.code(), absl::StatusCode::kDeadlineExceeded) << lost;
      EXPECT_LT(absl::Now() - start, absl::Seconds(30));
    });
  }
  for (std::thread& rank : ranks) rank.join();
}

}  // namespace
}  // namespace distopt
