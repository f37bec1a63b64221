// Defects found by probing AutogradService (issue 12), through a real
// daemon: a retried backward must not add the gradients twice, a refused
// call must leave nothing behind, and everything a context holds counts
// against --max_total_bytes.
#include <string>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/autograd.grpc.pb.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::ListContexts;
using ::distopt::testing::Ramp;
using ::distopt::testing::SameBytes;
using ::testing::HasSubstr;

class AutogradHardeningTest : public testing::WorkerTest {
 protected:
  // Room for a few small tensors and contexts, not for many.
  std::vector<std::string> WorkerFlags() const override {
    return {"--max_total_bytes=200000"};
  }

  RemoteParameter Weight(const std::string& name, int64_t out, int64_t in) {
    absl::StatusOr<RemoteParameter> w =
        client_.CreateParameter(address_, name, DType::kFloat32, {out, in},
                                init::Uniform(-1, 1, /*seed=*/3));
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? *w : RemoteParameter();
  }
};

// Without mutual TLS the context id alone separates two trainers on a
// daemon. Two clients that drew the same 16-bit client id would have made
// the same ids, counting from 1, and each trainer's step would apply the
// other's gradients too (found by a hostile probe after 131 to 291
// clients): every client's counter starts at random, so their ids differ
// below the client id as well. (They collide with odds of 2^-47 here.)
TEST(ContextIdTest, ClientsCountTheirContextsFromRandomStarts) {
  constexpr uint64_t kCounter = (uint64_t{1} << 48) - 1;
  Client first, second;
  const uint64_t a = first.NewContextId();
  const uint64_t b = second.NewContextId();
  EXPECT_NE(a & kCounter, b & kCounter);
  EXPECT_NE(a & kCounter, 0u);
  // Ids of one client still count up, and are still its own.
  EXPECT_EQ(first.NewContextId(), a + 1);
  EXPECT_EQ(first.NewContextId() >> 48, a >> 48);
}

// A backward retried with the same output gradients (a lost reply) returns
// the same input gradients and does not add the parameter's gradient again;
// a second backward with other gradients is refused, as torch refuses to
// backpropagate a graph twice.
TEST_F(AutogradHardeningTest, ABackwardIsAppliedOncePerForward) {
  const RemoteParameter w = Weight("w", 3, 4);
  const uint64_t context = client_.NewContextId();
  absl::StatusOr<Client::ForwardResult> forward =
      client_.Forward(address_, context, "linear", {w.id}, {Ramp({2, 4})});
  ASSERT_TRUE(forward.ok()) << forward.status();
  const Tensor out_grad = Ramp({2, 3}, 1.0f, 0.5f);
  auto first =
      client_.Backward(address_, context, forward->forward_id, {out_grad});
  ASSERT_TRUE(first.ok()) << first.status();
  const Tensor once = client_.GetGradients(address_, context)->at(w.id);

  auto retry =
      client_.Backward(address_, context, forward->forward_id, {out_grad});
  ASSERT_TRUE(retry.ok()) << retry.status();
  ASSERT_EQ(retry->size(), first->size());
  EXPECT_TRUE(SameBytes(*(*retry)[0], *(*first)[0]));
  EXPECT_TRUE(
      SameBytes(client_.GetGradients(address_, context)->at(w.id), once));

  auto other = client_.Backward(address_, context, forward->forward_id,
                                {Ramp({2, 3}, 9.0f)});
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(), HasSubstr("backpropagated already"));
  EXPECT_TRUE(
      SameBytes(client_.GetGradients(address_, context)->at(w.id), once));
}

// Gradients pushed in one call are added all or none: when the second does
// not fit the budget, the first is not added either, and a context the call
// created is not left behind.
TEST_F(AutogradHardeningTest, ARefusedAccumulationChangesNothing) {
  const RemoteParameter small = Weight("small", 1, 10);
  const RemoteParameter big = Weight("big", 200, 200);  // 160000 bytes.
  const uint64_t context = client_.NewContextId();
  absl::Status status = client_.AccumulateGradients(
      address_, context,
      {{small.id, Ramp({1, 10})}, {big.id, Ramp({200, 200})}});
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("\"big\""));
  EXPECT_EQ(ListContexts(client_, address_).contexts_size(), 0);

  ASSERT_TRUE(
      client_
          .AccumulateGradients(address_, context, {{small.id, Ramp({1, 10})}})
          .ok());
  status = client_.AccumulateGradients(
      address_, context,
      {{small.id, Ramp({1, 10})}, {big.id, Ramp({200, 200})}});
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  // The small gradient was added once, by the call that fit.
  EXPECT_TRUE(SameBytes(client_.GetGradients(address_, context)->at(small.id),
                        Ramp({1, 10})));
}

// The tensors a forward saves for its backward count against the budget,
// and ListContexts reports them.
TEST_F(AutogradHardeningTest, SavedTensorsCountAgainstTheBudget) {
  const RemoteParameter w = Weight("w", 4, 1000);  // 16000 bytes.
  const uint64_t context = client_.NewContextId();
  int forwards = 0;
  absl::Status status;
  for (; forwards < 100 && status.ok(); ++forwards) {
    // Each forward saves its 8 x 1000 input: 32000 bytes.
    status =
        client_.Forward(address_, context, "linear", {w.id}, {Ramp({8, 1000})})
            .status();
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("tensors saved by a forward"));
  EXPECT_LT(forwards, 10);
  const v1::ListContextsResponse listed = ListContexts(client_, address_);
  ASSERT_EQ(listed.contexts_size(), 1);
  EXPECT_EQ(listed.contexts(0).saved_bytes(), (forwards - 1) * 32000);
  ASSERT_TRUE(*client_.ReleaseContext(address_, context));
  // Released: the budget has room again.
  EXPECT_TRUE(client_
                  .Forward(address_, client_.NewContextId(), "linear", {w.id},
                           {Ramp({8, 1000})})
                  .ok());
}

// Every context costs its bookkeeping: contexts cannot grow without bound,
// and the listing comes in pages.
TEST_F(AutogradHardeningTest, ContextsAreCountedAndListedInPages) {
  const RemoteParameter w = Weight("w", 1, 1);
  int made = 0;
  absl::Status status;
  for (; made < 1000 && status.ok(); ++made) {
    status = client_.AccumulateGradients(address_, client_.NewContextId(),
                                         {{w.id, Ramp({1, 1})}});
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("autograd context"));
  const int alive = made - 1;
  EXPECT_GT(alive, 50);
  EXPECT_LT(alive, 200);

  int listed = 0;
  std::string token;
  int pages = 0;
  do {
    v1::ListContextsResponse page = ListContexts(client_, address_, 64, token);
    EXPECT_LE(page.contexts_size(), 64);
    listed += page.contexts_size();
    token = page.next_page_token();
    ++pages;
  } while (!token.empty() && pages < 100);
  EXPECT_EQ(listed, alive);
  EXPECT_GT(pages, 1);
}

}  // namespace
}  // namespace distopt
