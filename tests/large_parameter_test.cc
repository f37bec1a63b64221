// A 1 GiB parameter survives a write and a read through the client intact;
// an optimizer state dict larger than any one gRPC message (Adam over 12M
// floats: 96 MiB of state) goes out and back in, in chunks; autograd calls
// whose requests or replies exceed one message go chunked, and a call the
// daemon refused as too large for one message is not applied twice.
#include <cmath>
#include <cstdint>

#include "common/wire_limits.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

class LargeParameterTest : public testing::WorkerTest {};

float* Floats(Tensor& t) { return static_cast<float*>(t.data()); }

TEST_F(LargeParameterTest, LinearWithInputsBeyondOneMessage) {
  // x is 64 MiB (the forward goes chunked); dx comes back as large (the
  // unary backward is refused before it accumulates, then sent chunked).
  constexpr int64_t kBatch = 4096, kIn = 4096, kOut = 8;
  Tensor weight = testing::Ramp({kOut, kIn}, -1.0f, 1.0f / (kOut * kIn));
  absl::StatusOr<RemoteParameter> w =
      client_.CreateParameterFrom(address_, "w", weight);
  ASSERT_TRUE(w.ok()) << w.status();
  Tensor x = *Tensor::AllocateHost(DType::kFloat32, {kBatch, kIn});
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t k = 0; k < kIn; ++k) {
      Floats(x)[b * kIn + k] = static_cast<float>((b % 7) - 3 + 0.25 * (k % 5));
    }
  }
  ASSERT_GT(x.byte_size(), kMaxTensorPayloadBytes);
  const uint64_t context = client_.NewContextId();
  absl::StatusOr<Client::ForwardResult> forward =
      client_.Forward(address_, context, "linear", {w->id}, {x});
  ASSERT_TRUE(forward.ok()) << forward.status();
  ASSERT_EQ(forward->outputs.size(), 1u);
  // y[b][o] = sum_k x[b][k] w[o][k], checked on a few rows.
  for (int64_t b : {int64_t{0}, int64_t{1234}, kBatch - 1}) {
    for (int64_t o = 0; o < kOut; ++o) {
      double y = 0;
      for (int64_t k = 0; k < kIn; ++k) {
        y += double{Floats(x)[b * kIn + k]} * Floats(weight)[o * kIn + k];
      }
      EXPECT_NEAR(Floats(forward->outputs[0])[b * kOut + o], y,
                  1e-4 * (1 + std::abs(y)));
    }
  }

  Tensor ones = testing::Ramp({kBatch, kOut}, 1.0f, 0.0f);
  absl::StatusOr<std::vector<std::optional<Tensor>>> backward =
      client_.Backward(address_, context, forward->forward_id, {ones});
  ASSERT_TRUE(backward.ok()) << backward.status();
  ASSERT_TRUE((*backward)[0].has_value());
  Tensor& dx = *(*backward)[0];
  ASSERT_EQ(dx.shape(), x.shape());
  // dx[b][k] = sum_o w[o][k]: the same for every row.
  for (int64_t b : {int64_t{0}, kBatch - 1}) {
    for (int64_t k = 0; k < kIn; k += 511) {
      double sum = 0;
      for (int64_t o = 0; o < kOut; ++o) sum += Floats(weight)[o * kIn + k];
      EXPECT_NEAR(Floats(dx)[b * kIn + k], sum, 1e-5);
    }
  }
  // dw[o][k] = sum_b x[b][k], accumulated once although the backward was
  // sent twice (unary, refused; then chunked).
  absl::StatusOr<std::map<uint64_t, Tensor>> gradients =
      client_.GetGradients(address_, context);
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  Tensor& dw = gradients->at(w->id);
  for (int64_t k = 0; k < kIn; k += 97) {
    double sum = 0;
    for (int64_t b = 0; b < kBatch; ++b) sum += Floats(x)[b * kIn + k];
    for (int64_t o = 0; o < kOut; ++o) {
      EXPECT_NEAR(Floats(dw)[o * kIn + k], sum, 1e-3 * (1 + std::abs(sum)))
          << "dw[" << o << "][" << k << "]";
    }
  }
}

TEST_F(LargeParameterTest, EmbeddingWithOutputsBeyondOneMessage) {
  // 5000 rows of 4096 floats looked up: 78 MiB of output from 40 KB of
  // indices. The unary forward is refused (nothing recorded), the chunked
  // one answers; the backward's request is as large.
  constexpr int64_t kRows = 1024, kDim = 4096, kLookups = 5000;
  Tensor table = testing::Ramp({kRows, kDim}, 0.0f, 1.0f);
  absl::StatusOr<RemoteParameter> e =
      client_.CreateParameterFrom(address_, "table", table);
  ASSERT_TRUE(e.ok()) << e.status();
  Tensor indices = *Tensor::AllocateHost(DType::kInt64, {kLookups});
  int64_t* index = static_cast<int64_t*>(indices.data());
  for (int64_t i = 0; i < kLookups; ++i) index[i] = (i * 37) % kRows;
  const uint64_t context = client_.NewContextId();
  absl::StatusOr<Client::ForwardResult> forward =
      client_.Forward(address_, context, "embedding", {e->id}, {indices});
  ASSERT_TRUE(forward.ok()) << forward.status();
  Tensor& out = forward->outputs[0];
  ASSERT_EQ(out.shape(), (Shape{kLookups, kDim}));
  ASSERT_GT(out.byte_size(), kMaxTensorPayloadBytes);
  for (int64_t i = 0; i < kLookups; i += 999) {
    for (int64_t d = 0; d < kDim; d += 1023) {
      EXPECT_EQ(Floats(out)[i * kDim + d], Floats(table)[index[i] * kDim + d]);
    }
  }
  Tensor ones = testing::Ramp({kLookups, kDim}, 1.0f, 0.0f);
  absl::StatusOr<std::vector<std::optional<Tensor>>> backward =
      client_.Backward(address_, context, forward->forward_id, {ones});
  ASSERT_TRUE(backward.ok()) << backward.status();
  absl::StatusOr<std::map<uint64_t, Tensor>> gradients =
      client_.GetGradients(address_, context);
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  // Each row's gradient counts its lookups (one forward was recorded).
  std::vector<int> lookups(kRows, 0);
  for (int64_t i = 0; i < kLookups; ++i) ++lookups[index[i]];
  Tensor& grad = gradients->at(e->id);
  for (int64_t r = 0; r < kRows; r += 7) {
    EXPECT_EQ(Floats(grad)[r * kDim + kDim - 1], lookups[r]) << "row " << r;
  }
  // Only the chunked forward left a record: the forward ids of the context
  // are used once.
  absl::StatusOr<std::vector<std::optional<Tensor>>> stale =
      client_.Backward(address_, context, forward->forward_id - 1, {ones});
  EXPECT_FALSE(stale.ok());
}

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
