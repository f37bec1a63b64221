// Chunked message reassembly (common/chunked_message.h): ReadChunked over a
// stream of v1::MessageChunk, as the daemon reads LoadStateDict requests
// (optimizer, ZeRO, post-local SGD) and chunked autograd calls, with a
// MemoryBudget charged for the buffer while it arrives.
//
// Input: a byte choosing the message type, a byte choosing the size limit
// and the budget, then the chunks, each a part (16-bit length, then a
// serialized v1::MessageChunk). A part that does not parse ends the stream,
// as a broken stream does. Whatever the outcome, the budget must be back
// at zero afterwards; a message that was read must write (WriteChunked)
// and read back to an equal one.
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/chunked_message.h"
#include "common/memory_budget.h"
#include "common/wire_limits.h"
#include "proto/distopt/v1/autograd.pb.h"
#include "proto/distopt/v1/local_sgd.pb.h"
#include "proto/distopt/v1/optimizer.pb.h"
#include "proto/distopt/v1/tensor.pb.h"
#include "proto/distopt/v1/zero.pb.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace distopt;  // NOLINT

// Yields the chunks of the input, as a gRPC stream's Read would.
class InputChunks {
 public:
  explicit InputChunks(fuzz::InputReader* in) : in_(in) {}
  bool Read(v1::MessageChunk* chunk) {
    if (in_->empty()) return false;
    return fuzz::Parse(in_->Part(), chunk);
  }

 private:
  fuzz::InputReader* in_;
};

// Collects what WriteChunked writes, then yields it back.
class Loopback {
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

 private:
  std::vector<v1::MessageChunk> chunks_;
  size_t next_ = 0;
};

std::unique_ptr<google::protobuf::Message> MessageOfType(uint8_t type) {
  switch (type % 4) {
    case 0:
      return std::make_unique<v1::LoadStateDictRequest>();
    case 1:
      return std::make_unique<v1::ForwardRequest>();
    case 2:
      return std::make_unique<v1::ZeroStateDict>();
    default:
      return std::make_unique<v1::PostLocalSgdStateDict>();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::LimitMemoryOnce();
  fuzz::InputReader in(data, size);
  const uint8_t type = in.Byte();
  const uint8_t limits = in.Byte();
  static constexpr int64_t kMaxTotals[] = {0, 64, 4096, 64 << 10};
  static constexpr uint64_t kBudgets[] = {0, 1 << 20, 100, 64 << 10};
  const int64_t max_total = kMaxTotals[limits & 3];
  MemoryBudget budget(/*max_tensor_bytes=*/0, kBudgets[(limits >> 2) & 3]);
  const bool with_budget = (limits & 0x10) == 0;

  std::unique_ptr<google::protobuf::Message> message = MessageOfType(type);
  InputChunks chunks(&in);
  const absl::Status read =
      ReadChunked(&chunks, "request", message.get(), max_total,
                  with_budget ? &budget : nullptr);
  fuzz::Report("ReadChunked", read);
  if (budget.used_bytes() != 0) std::abort();  // The buffer's reservation.
  if (!read.ok()) return 0;

  Loopback loopback;
  if (!WriteChunked(*message, &loopback)) std::abort();
  std::unique_ptr<google::protobuf::Message> again = MessageOfType(type);
  MemoryBudget unlimited(0, 0);
  const absl::Status reread =
      ReadChunked(&loopback, "reply", again.get(),
                  std::numeric_limits<int32_t>::max(), &unlimited);
  if (!reread.ok() || !fuzz::SameMessage(*message, *again)) std::abort();
  if (unlimited.used_bytes() != 0) std::abort();
  return 0;
}
