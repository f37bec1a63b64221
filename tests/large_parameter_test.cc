// A 1 GiB parameter survives a write and a read through the client intact;
// an optimizer state dict larger than any one gRPC message (Adam over 12M
// floats: 96 MiB of state) goes out and back in, in chunks.
#include <cstdint>

#include "common/wire_limits.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

class LargeParameterTest : public testing::WorkerTest {};

TEST_F(LargeParameterTest, OneGibibyteRoundTripsIntact) {
  constexpr int64_t kElements = (int64_t{1} << 30) / 4;
  Tensor values = *Tensor::AllocateHost(DType::kFloat32, {kElements});
  // A pattern in which every 4-byte word differs from its neighbours, so a
  // chunk written to the wrong offset cannot go unnoticed.
  uint32_t* words = static_cast<uint32_t*>(values.data());
  for (int64_t i = 0; i < kElements; ++i) {
    words[i] = static_cast<uint32_t>(i * 2654435761u);
  }
  absl::StatusOr<RemoteParameter> p =
      client_.CreateParameterFrom(address_, "one_gib", values);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<ParameterInfo> info = client_.GetParameter(*p);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->byte_size, int64_t{1} << 30);

  absl::StatusOr<Tensor> read = client_.ReadParameter(*p);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->byte_size(), values.byte_size());
  const uint32_t* got = static_cast<const uint32_t*>(read->data());
  for (int64_t i = 0; i < kElements; ++i) {
    ASSERT_EQ(got[i], words[i]) << "word " << i;
  }
}

TEST_F(LargeParameterTest, AStateDictLargerThanAMessageRoundTrips) {
  constexpr int64_t kElements = 12 << 20;
  Tensor ramp = testing::Ramp({kElements}, -1.0f, 1e-7f);
  absl::StatusOr<RemoteParameter> first =
      client_.CreateParameterFrom(address_, "first", ramp);
  absl::StatusOr<RemoteParameter> second =
      client_.CreateParameterFrom(address_, "second", ramp);
  ASSERT_TRUE(first.ok() && second.ok());
  auto adam = client_.CreateOptimizer(
      address_, "adam", {{"lr", hyper::Number(1e-3)}}, {first->id});
  auto other = client_.CreateOptimizer(
      address_, "adam", {{"lr", hyper::Number(1e-3)}}, {second->id});
  ASSERT_TRUE(adam.ok() && other.ok());
  const uint64_t context_id = client_.NewContextId();
  ASSERT_TRUE(
      client_.AccumulateGradients(address_, context_id, {{first->id, ramp}})
          .ok());
  ASSERT_TRUE(client_.Step(address_, adam->id(), context_id).ok());

  absl::StatusOr<v1::OptimizerStateDict> saved =
      client_.GetStateDict(address_, adam->id());
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_GT(saved->ByteSizeLong(), size_t{kMaxMessageBytes});
  ASSERT_EQ(saved->state_size(), 1);
  EXPECT_EQ(saved->state(0).buffers().at("exp_avg_sq").data().size(),
            size_t{kElements} * 4);
  absl::Status load = client_.LoadStateDict(address_, other->id(), *saved);
  ASSERT_TRUE(load.ok()) << load;
  absl::StatusOr<v1::OptimizerStateDict> loaded =
      client_.GetStateDict(address_, other->id());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  // Compared field by field (map order in serialized bytes may differ), and
  // without printing 96 MiB on a mismatch.
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(*loaded, *saved));
}

}  // namespace
}  // namespace distopt
