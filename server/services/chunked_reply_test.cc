#include "server/services/chunked_reply.h"

#include <string>
#include <vector>

#include "common/chunked_message.h"
#include "gmock/gmock.h"
#include "grpcpp/server_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/optimizer.pb.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

// Chunks written once, read back; records the budget's use at each read.
class Pipe {
 public:
  explicit Pipe(const MemoryBudget* budget) : budget_(budget) {}
  bool Write(const v1::MessageChunk& chunk) {
    chunks_.push_back(chunk);
    return true;
  }
  bool Read(v1::MessageChunk* chunk) {
    used_.push_back(budget_->used_bytes());
    if (next_ == chunks_.size()) return false;
    *chunk = chunks_[next_++];
    return true;
  }
  const std::vector<uint64_t>& used() const { return used_; }

 private:
  const MemoryBudget* const budget_;
  std::vector<v1::MessageChunk> chunks_;
  size_t next_ = 0;
  std::vector<uint64_t> used_;
};

// A request of about `bytes` bytes.
v1::LoadStateDictRequest Request(int bytes) {
  v1::LoadStateDictRequest request;
  request.set_optimizer_id(7);
  request.mutable_state_dict()->set_kind(std::string(bytes, 'x'));
  return request;
}

class ReadRequestChunkedTest : public ::testing::Test {
 protected:
  StreamLimits limits_{StreamLimitOptions{}};
  grpc::ServerContext context_;
};

TEST_F(ReadRequestChunkedTest, ChargesTheBufferWhileItArrives) {
  MemoryBudget budget(0, 8 << 20);
  Pipe pipe(&budget);
  const v1::LoadStateDictRequest sent = Request(3 << 20);  // Four chunks.
  ASSERT_TRUE(WriteChunked(sent, &pipe));
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      limits_.Acquire(&context_, "LoadStateDict");
  ASSERT_TRUE(slot.ok());
  v1::LoadStateDictRequest received;
  ASSERT_TRUE(
      ReadRequestChunked(&pipe, slot->get(), &budget, "request", &received)
          .ok());
  EXPECT_EQ(received.optimizer_id(), 7);
  // Nothing before the first chunk, its announced total after it, and
  // nothing once the message is parsed.
  ASSERT_GE(pipe.used().size(), 3u);
  EXPECT_EQ(pipe.used().front(), 0u);
  EXPECT_EQ(pipe.used()[1], sent.ByteSizeLong());
  EXPECT_EQ(budget.used_bytes(), 0u);
}

TEST_F(ReadRequestChunkedTest, ARequestOverTheBudgetIsRefusedUnbuffered) {
  MemoryBudget budget(0, 1 << 20);
  Pipe pipe(&budget);
  ASSERT_TRUE(WriteChunked(Request(2 << 20), &pipe));
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
      limits_.Acquire(&context_, "LoadStateDict");
  ASSERT_TRUE(slot.ok());
  v1::LoadStateDictRequest received;
  const absl::Status status =
      ReadRequestChunked(&pipe, slot->get(), &budget, "state_dict", &received);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("state_dict: "));
  EXPECT_THAT(status.message(), HasSubstr("--max_total_bytes"));
  // Refused at the first chunk.
  EXPECT_EQ(pipe.used().size(), 1u);
  EXPECT_EQ(budget.used_bytes(), 0u);
}

}  // namespace
}  // namespace distopt
