// Data-parallel training end to end: two daemons joined as ranks, each
// holding the demo's two-layer MLP (same seeds, so the same start); a
// trainer thread per rank runs forward and backward on its own half of
// every global mini-batch through its daemon and steps ZeRO (Adam, state
// sharded) with RemoteZero; the rank whose data runs out first joins. Both
// ranks end with identical parameters, and the model reaches the demo's
// held-out accuracy.
#include <algorithm>
#include <numeric>
#include <random>
#include <thread>

#include "client/data_parallel.h"
#include "client/dist_autograd_context.h"
#include "client/examples/digits_training.h"
#include "client/layers.h"
#include "client/local_ops.h"
#include "gtest/gtest.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

constexpr int kWorld = 2;
constexpr int kBatchPerRank = 32;
constexpr int kEpochs = 20;

TEST(DigitsZeroTest, TwoRanksTrainTheDemoModelWithShardedAdam) {
  std::vector<std::unique_ptr<LocalWorker>> ranks;
  std::vector<std::string> addresses;
  for (int r = 0; r < kWorld; ++r) {
    ranks.push_back(testing::StartRankOrDie(
        {absl::StrCat("--rank=", r), absl::StrCat("--world_size=", kWorld),
         r == 0 ? "--rendezvous=127.0.0.1:1"
                : "--rendezvous=" + addresses[0]}));
    ASSERT_NE(ranks.back(), nullptr);
    addresses.push_back(ranks.back()->address());
  }
  absl::StatusOr<DigitsData> data =
      LoadDigits(std::string(std::getenv("TEST_SRCDIR")) +
                 "/distopt/data/digits/digits.csv.gz");
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<size_t> order(data->labels.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(7);
  std::shuffle(order.begin(), order.end(), rng);
  const size_t train = order.size() * 4 / 5;
  std::vector<size_t> train_order(order.begin(), order.begin() + train);
  const std::vector<size_t> test_order(order.begin() + train, order.end());

  Client client;
  std::vector<RemoteLinear> layer1, layer2;
  std::vector<RemoteZero> zero;
  v1::CreateZeroRequest spec;
  spec.set_kind("adam");
  spec.set_timeout_ms(30000);
  v1::ZeroParamGroup* group = spec.add_groups();
  (*group->mutable_hyperparameters())["lr"].set_number(0.01);
  for (const char* name :
       {"layer1.weight", "layer1.bias", "layer2.weight", "layer2.bias"}) {
    group->add_parameter_names(name);
  }
  for (int r = 0; r < kWorld; ++r) {
    auto first =
        RemoteLinear::Create(&client, addresses[r], "layer1", 64, 64, 1);
    auto second =
        RemoteLinear::Create(&client, addresses[r], "layer2", 64, 10, 11);
    ASSERT_TRUE(first.ok() && second.ok());
    layer1.push_back(*first);
    layer2.push_back(*second);
    zero.emplace_back(&client, addresses[r]);
  }
  std::vector<absl::Status> created(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back(
        [&, r] { created[r] = zero[r].Create(spec).status(); });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(created[0].ok() && created[1].ok()) << created[0] << created[1];

  Tensor one = *Tensor::AllocateHost(DType::kFloat32, {});
  one.host_span<float>()[0] = 1.0f;
  // Rank r trains on rows [r * kBatchPerRank, (r + 1) * kBatchPerRank) of
  // every global batch; the last, partial batch may leave rank 1 without
  // data, and it then joins.
  auto train_rank = [&](int r) -> absl::Status {
    for (size_t begin = r * kBatchPerRank; begin < train_order.size();
         begin += kWorld * kBatchPerRank) {
      const size_t end = std::min(train_order.size(), begin + kBatchPerRank);
      DistAutogradContext context(&client);
      std::vector<int64_t> labels;
      Variable x{DigitsBatch(*data, train_order, begin, end, &labels), -1};
      auto hidden = layer1[r].Forward(context, x);
      if (!hidden.ok()) return hidden.status();
      auto logits = layer2[r].Forward(context, Relu(context, *hidden));
      if (!logits.ok()) return logits.status();
      auto ce = SoftmaxCrossEntropy(context, *logits, labels);
      if (!ce.ok()) return ce.status();
      absl::Status status = context.Backward(ce->loss, one);
      if (status.ok()) status = zero[r].Step(context.id());
      if (!status.ok()) return status;
    }
    return zero[r].Join(absl::Seconds(60)).status();
  };
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    std::shuffle(train_order.begin(), train_order.end(), rng);
    std::vector<absl::Status> trained(kWorld);
    threads.clear();
    for (int r = 0; r < kWorld; ++r) {
      threads.emplace_back([&, r] { trained[r] = train_rank(r); });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(trained[r].ok())
          << "epoch " << epoch << " rank " << r << ": " << trained[r];
    }
  }

  // Both ranks hold the same model.
  for (const auto* layers : {&layer1, &layer2}) {
    for (size_t p = 0; p < 2; ++p) {
      auto mine = client.ReadParameter((*layers)[0].parameters()[p]);
      auto theirs = client.ReadParameter((*layers)[1].parameters()[p]);
      ASSERT_TRUE(mine.ok() && theirs.ok());
      EXPECT_TRUE(testing::SameBytes(*mine, *theirs));
    }
  }
  // Held-out accuracy of rank 0's model.
  int correct = 0;
  DistAutogradContext context(&client);
  std::vector<int64_t> labels;
  Variable x{DigitsBatch(*data, test_order, 0, test_order.size(), &labels), -1};
  auto hidden = layer1[0].Forward(context, x);
  ASSERT_TRUE(hidden.ok());
  auto logits = layer2[0].Forward(context, Relu(context, *hidden));
  ASSERT_TRUE(logits.ok());
  auto ce = SoftmaxCrossEntropy(context, *logits, labels);
  ASSERT_TRUE(ce.ok());
  for (size_t i = 0; i < labels.size(); ++i) {
    correct += ce->predictions[i] == labels[i];
  }
  const double accuracy = static_cast<double>(correct) / labels.size();
  EXPECT_GE(accuracy, 0.95);
  // Each rank holds about half of Adam's state.
  auto info = zero[0].Get();
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->ranks_size(), kWorld);
  EXPECT_GT(info->ranks(0).state_bytes(), 0);
  EXPECT_GT(info->ranks(1).state_bytes(), 0);
}

}  // namespace
}  // namespace distopt
