// Large messages in chunks: a state dict of several MiB crosses as chunks
// of at most 1 MiB and comes back equal; chunks that do not add up to the
// announced total, no chunks, or bytes that do not parse are refused,
// naming the field.
#include "common/chunked_message.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/optimizer.pb.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

// A stream that keeps what is written and gives it back in order.
class Pipe {
 public:
  bool Write(const v1::MessageChunk& chunk) {
    chunks_.push_back(chunk);
    return true;
  }
  bool Read(v1::MessageChunk* chunk) {
    if (next_ >= chunks_.size()) return false;
    *chunk = chunks_[next_++];
    return true;
  }
  std::vector<v1::MessageChunk> chunks_;
  size_t next_ = 0;
};

v1::OptimizerStateDict LargeDict() {
  v1::OptimizerStateDict dict;
  dict.set_kind("adam");
  v1::ParameterState* state = dict.add_state();
  state->set_index(3);
  (*state->mutable_buffers())["exp_avg"].set_data(std::string(5 << 20, 'x'));
  return dict;
}

TEST(ChunkedMessageTest, ALargeMessageCrossesInChunksOfAtMostOneMiB) {
  Pipe pipe;
  const v1::OptimizerStateDict dict = LargeDict();
  ASSERT_TRUE(WriteChunked(dict, &pipe));
  EXPECT_GE(pipe.chunks_.size(), 5u);
  for (const v1::MessageChunk& chunk : pipe.chunks_) {
    EXPECT_LE(static_cast<int64_t>(chunk.data().size()), kChunkBytes);
  }
  EXPECT_EQ(pipe.chunks_[0].total_bytes(),
            static_cast<int64_t>(dict.ByteSizeLong()));
  v1::OptimizerStateDict back;
  ASSERT_TRUE(ReadChunked(&pipe, "state_dict", &back).ok());
  EXPECT_EQ(back.SerializeAsString(), dict.SerializeAsString());
}

TEST(ChunkedMessageTest, BadStreamsAreRefusedNamingTheField) {
  v1::OptimizerStateDict out;
  Pipe empty;
  EXPECT_THAT(ReadChunked(&empty, "state_dict", &out).message(),
              HasSubstr("state_dict: no chunks"));

  Pipe short_stream;
  ASSERT_TRUE(WriteChunked(LargeDict(), &short_stream));
  short_stream.chunks_.pop_back();
  EXPECT_THAT(ReadChunked(&short_stream, "state_dict", &out).message(),
              HasSubstr("announced"));

  Pipe long_stream;
  ASSERT_TRUE(WriteChunked(LargeDict(), &long_stream));
  long_stream.chunks_.push_back(long_stream.chunks_.back());
  EXPECT_THAT(ReadChunked(&long_stream, "state_dict", &out).message(),
              HasSubstr("more than"));

  Pipe garbage;
  v1::MessageChunk chunk;
  chunk.set_total_bytes(3);
  chunk.set_data("\xff\xff\xff");
  garbage.Write(chunk);
  const absl::Status refused = ReadChunked(&garbage, "state_dict", &out);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("do not parse"));

  Pipe huge;
  chunk.set_total_bytes(int64_t{1} << 40);
  huge.Write(chunk);
  EXPECT_THAT(ReadChunked(&huge, "state_dict", &out).message(),
              HasSubstr("total_bytes"));
}

}  // namespace
}  // namespace distopt
