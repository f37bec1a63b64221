// Data-parallel training end to end: two daemons joined as ranks, each
// holding the demo's two-layer MLP (same seeds, so the same start); a
// trainer thread per rank runs forward and backward on its own half of
// every global mini-batch through its daemon and steps ZeRO (Adam, state
// sharded) with RemoteZero. Both ranks end with identical parameters, and
// the model reaches the demo's held-out accuracy: when the rank whose data
// runs out first joins, and when both ranks are SIGKILLed 20 times and
// resume from their group checkpoints.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

// The demo's data, split as the demo does, and the model of every rank.
class DigitsZeroTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<DigitsData> data =
        LoadDigits(std::string(std::getenv("TEST_SRCDIR")) +
                   "/distopt/data/digits/digits.csv.gz");
    ASSERT_TRUE(data.ok()) << data.status();
    data_ = *std::move(data);
    std::vector<size_t> order(data_.labels.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    const size_t train = order.size() * 4 / 5;
    train_order_.assign(order.begin(), order.begin() + train);
    test_order_.assign(order.begin() + train, order.end());
    spec_.set_kind("adam");
    spec_.set_timeout_ms(30000);
    v1::ZeroParamGroup* group = spec_.add_groups();
    (*group->mutable_hyperparameters())["lr"].set_number(0.01);
    for (const char* name :
         {"layer1.weight", "layer1.bias", "layer2.weight", "layer2.bias"}) {
      group->add_parameter_names(name);
    }
  }

  // The model on rank r's daemon (same seeds on every rank).
  void CreateModel(int r, const std::string& address) {
    auto first = RemoteLinear::Create(&client_, address, "layer1", 64, 64, 1);
    auto second = RemoteLinear::Create(&client_, address, "layer2", 64, 10, 11);
    ASSERT_TRUE(first.ok() && second.ok());
    layer1_.push_back(*first);
    layer2_.push_back(*second);
    zero_.emplace_back(&client_, address);
  }

  // `call(r)` on every rank at once; the first error, or OK.
  absl::Status OnEveryRank(const std::function<absl::Status(int)>& call) {
    std::vector<absl::Status> results(kWorld);
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
      threads.emplace_back([&, r] { results[r] = call(r); });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < kWorld; ++r) {
      if (!results[r].ok()) {
        return absl::Status(
            results[r].code(),
            absl::StrCat("rank ", r, ": ", results[r].message()));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CreateZero() {
    return OnEveryRank([&](int r) { return zero_[r].Create(spec_).status(); });
  }

  // Rank r's forward, backward and ZeRO step on rows order[begin, end).
  absl::Status TrainBatch(int r, const std::vector<size_t>& order, size_t begin,
                          size_t end) {
    DistAutogradContext context(&client_);
    std::vector<int64_t> labels;
    Variable x{DigitsBatch(data_, order, begin, end, &labels), -1};
    auto hidden = layer1_[r].Forward(context, x);
    if (!hidden.ok()) return hidden.status();
    auto logits = layer2_[r].Forward(context, Relu(context, *hidden));
    if (!logits.ok()) return logits.status();
    auto ce = SoftmaxCrossEntropy(context, *logits, labels);
    if (!ce.ok()) return ce.status();
    Tensor one = *Tensor::AllocateHost(DType::kFloat32, {});
    one.host_span<float>()[0] = 1.0f;
    absl::Status status = context.Backward(ce->loss, one);
    if (status.ok()) status = zero_[r].Step(context.id());
    return status;
  }

  // Every rank's model values, parameter by parameter.
  absl::StatusOr<std::vector<Tensor>> ReadModel(int r) {
    std::vector<Tensor> model;
    for (const RemoteLinear* layer : {&layer1_[r], &layer2_[r]}) {
      for (const RemoteParameter& p : layer->parameters()) {
        absl::StatusOr<Tensor> values = client_.ReadParameter(p);
        if (!values.ok()) return values.status();
        model.push_back(*std::move(values));
      }
    }
    return model;
  }

  void ExpectRanksHoldTheSameModel() {
    absl::StatusOr<std::vector<Tensor>> mine = ReadModel(0);
    absl::StatusOr<std::vector<Tensor>> theirs = ReadModel(1);
    ASSERT_TRUE(mine.ok() && theirs.ok());
    for (size_t p = 0; p < mine->size(); ++p) {
      EXPECT_TRUE(testing::SameBytes((*mine)[p], (*theirs)[p])) << p;
    }
  }

  // Held-out accuracy of rank 0's model.
  double TestAccuracy() {
    int correct = 0;
    DistAutogradContext context(&client_);
    std::vector<int64_t> labels;
    Variable x{DigitsBatch(data_, test_order_, 0, test_order_.size(), &labels),
               -1};
    auto hidden = layer1_[0].Forward(context, x);
    EXPECT_TRUE(hidden.ok()) << hidden.status();
    if (!hidden.ok()) return 0;
    auto logits = layer2_[0].Forward(context, Relu(context, *hidden));
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return 0;
    auto ce = SoftmaxCrossEntropy(context, *logits, labels);
    EXPECT_TRUE(ce.ok()) << ce.status();
    if (!ce.ok()) return 0;
    for (size_t i = 0; i < labels.size(); ++i) {
      correct += ce->predictions[i] == labels[i];
    }
    return static_cast<double>(correct) / labels.size();
  }

  std::mt19937_64 rng_{7};
  DigitsData data_;
  std::vector<size_t> train_order_;
  std::vector<size_t> test_order_;
  v1::CreateZeroRequest spec_;
  Client client_;
  std::vector<RemoteLinear> layer1_, layer2_;
  std::vector<RemoteZero> zero_;
};

TEST_F(DigitsZeroTest, TwoRanksTrainTheDemoModelWithShardedAdam) {
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
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_NO_FATAL_FAILURE(CreateModel(r, addresses[r]));
  }
  ASSERT_TRUE(CreateZero().ok());

  // Rank r trains on rows [r * kBatchPerRank, (r + 1) * kBatchPerRank) of
  // every global batch; the last, partial batch may leave rank 1 without
  // data, and it then joins.
  auto train_rank = [&](int r) -> absl::Status {
    for (size_t begin = r * kBatchPerRank; begin < train_order_.size();
         begin += kWorld * kBatchPerRank) {
      const size_t end = std::min(train_order_.size(), begin + kBatchPerRank);
      absl::Status status = TrainBatch(r, train_order_, begin, end);
      if (!status.ok()) return status;
    }
    return zero_[r].Join(absl::Seconds(60)).status();
  };
  for (int epoch = 0; epoch < 20; ++epoch) {
    std::shuffle(train_order_.begin(), train_order_.end(), rng_);
    absl::Status trained = OnEveryRank(train_rank);
    ASSERT_TRUE(trained.ok()) << "epoch " << epoch << ": " << trained;
  }
  ExpectRanksHoldTheSameModel();
  EXPECT_GE(TestAccuracy(), 0.95);
  // Each rank holds about half of Adam's state.
  auto info = zero_[0].Get();
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->ranks_size(), kWorld);
  EXPECT_GT(info->ranks(0).state_bytes(), 0);
  EXPECT_GT(info->ranks(1).state_bytes(), 0);
}

// Seeded chaos: both ranks save a group checkpoint every 4 group steps
// (keeping 3) and are SIGKILLed 20 times at random moments, one rank and
// then, a few milliseconds later, the other (a job that dies), half of the
// times just as a save begins; they are restarted on their folders and
// ports, and the trainer creates the ZeRO optimizer again, which resumes
// the group at the step the ranks agree on. The test records the model
// after every group step and the consolidated state at every saved step:
// after every restart the model and the state are bit for bit those of the
// step resumed at, every step trained again gives bit for bit what it gave
// the first time, and the run reaches the demo's accuracy.
TEST_F(DigitsZeroTest, ResumesBitForBitThroughTwentyKillsOfBothRanks) {
  constexpr int kEvery = 4;
  constexpr int kKills = 20;
  const size_t steps_per_epoch =
      train_order_.size() / (kWorld * kBatchPerRank);  // Whole batches.
  const int64_t total_steps = 20 * steps_per_epoch;
  const std::filesystem::path root =
      std::filesystem::path(std::getenv("TEST_TMPDIR")) / "zero_chaos";
  std::vector<std::string> listen;
  for (int r = 0; r < kWorld; ++r) {
    listen.push_back(testing::ReusableAddress());
    ASSERT_FALSE(listen.back().empty());
  }
  auto flags = [&](int r) {
    return std::vector<std::string>{
        absl::StrCat("--rank=", r),
        absl::StrCat("--world_size=", kWorld),
        r == 0 ? "--rendezvous=127.0.0.1:1" : "--rendezvous=" + listen[0],
        "--listen=" + listen[r],
        absl::StrCat("--checkpoint_dir=",
                     (root / absl::StrCat("rank", r)).string()),
        absl::StrCat("--checkpoint_every_steps=", kEvery),
        "--checkpoint_keep=3",
        "--group_timeout=20s"};
  };
  std::vector<std::unique_ptr<LocalWorker>> ranks(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    ranks[r] = testing::StartRankOrDie(flags(r));
    ASSERT_NE(ranks[r], nullptr);
  }
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_NO_FATAL_FAILURE(CreateModel(r, listen[r]));
  }
  // A short collective timeout: a Create that a killed rank never joins
  // fails soon, and the trainer tries again.
  spec_.set_timeout_ms(5000);
  ASSERT_TRUE(CreateZero().ok());

  // The group step the trainer last finished, the steps it has finished
  // since it started, and the restarts done.
  std::atomic<int64_t> finished{0};
  std::atomic<int64_t> progress{0};
  std::atomic<int> generation{0};
  std::atomic<bool> done{false};
  std::atomic<int> failed_restarts{0};
  std::atomic<int> kills_in_a_save{0};
  std::thread chaos([&] {
    // Kills begin once both ranks hold a checkpoint of the group on disk
    // (a step past the first save waits only for its copy, not its write:
    // a kill before the write ends would leave nothing to resume from).
    Client lister;
    auto saved_the_group = [&] {
      for (int r = 0; r < kWorld; ++r) {
        absl::StatusOr<v1::ListCheckpointsResponse> listed =
            lister.ListCheckpoints(listen[r]);
        if (!listed.ok()) return false;
        bool found = false;
        for (const v1::CheckpointInfo& one : listed->checkpoints()) {
          found = found || (one.whole() && one.reason() == "periodic");
        }
        if (!found) return false;
      }
      return true;
    };
    if (!testing::PollUntil(
            [&] { return done || (finished > kEvery && saved_the_group()); },
            absl::Seconds(60))) {
      ++failed_restarts;
      return;
    }
    std::mt19937 random(20261130);
    for (int kill = 0; kill < kKills && !done; ++kill) {
      // The group trains again since the last restart.
      const int64_t before = progress;
      if (!testing::PollUntil([&] { return done || progress > before; },
                              absl::Seconds(120))) {
        ++failed_restarts;
        return;
      }
      if (kill % 2 == 0) {
        absl::SleepFor(absl::Milliseconds(
            std::uniform_int_distribution<int>(20, 300)(random)));
      } else {
        // Just as a save begins: the step after a multiple of kEvery.
        const int64_t at = finished;
        testing::PollUntil(
            [&] { return done || (finished > at && finished % kEvery == 0); },
            absl::Seconds(60));
      }
      const int first = std::uniform_int_distribution<int>(0, 1)(random);
      for (int k = 0; k < kWorld; ++k) {
        const int r = (first + k) % kWorld;
        ranks[r]->Signal(SIGKILL);
        if (!ranks[r]->Wait(absl::Seconds(30)).ok()) ++failed_restarts;
        if (std::filesystem::exists(root / absl::StrCat("rank", r) /
                                    "parameters.new")) {
          ++kills_in_a_save;
        }
        if (k == 0) {
          absl::SleepFor(absl::Milliseconds(
              std::uniform_int_distribution<int>(0, 10)(random)));
        }
      }
      for (int r = 0; r < kWorld; ++r) {
        ranks[r] = testing::StartRankOrDie(flags(r));
        if (ranks[r] == nullptr) {
          ++failed_restarts;
          return;
        }
      }
      ++generation;
    }
  });

  // The chaos thread stops and is joined however the test ends.
  struct JoinAtExit {
    std::atomic<bool>* done;
    std::thread* thread;
    ~JoinAtExit() {
      *done = true;
      if (thread->joinable()) thread->join();
    }
  } join_at_exit{&done, &chaos};

  // What every group step left: the model, and at saved steps the state.
  std::map<int64_t, std::vector<Tensor>> models;
  std::map<int64_t, std::string> states;
  absl::StatusOr<std::vector<Tensor>> initial = ReadModel(0);
  ASSERT_TRUE(initial.ok());
  models[0] = *std::move(initial);
  int seen_generation = 0;
  int resumes = 0;
  int resumes_checked_against_a_state = 0;
  int resumes_at_an_unrecorded_step = 0;
  int64_t step = 0;
  std::vector<size_t> order;
  int order_epoch = -1;
  while (step < total_steps) {
    // One group step: every rank on its half of the global batch.
    const int epoch = static_cast<int>(step / steps_per_epoch);
    if (epoch != order_epoch) {
      order = train_order_;
      std::shuffle(order.begin(), order.end(), std::mt19937_64(1000 + epoch));
      order_epoch = epoch;
    }
    const size_t base = (step % steps_per_epoch) * kWorld * kBatchPerRank;
    absl::Status status = OnEveryRank([&](int r) {
      const size_t begin = base + r * kBatchPerRank;
      return TrainBatch(r, order, begin, begin + kBatchPerRank);
    });
    absl::StatusOr<std::vector<Tensor>> model =
        status.ok() ? ReadModel(0)
                    : absl::StatusOr<std::vector<Tensor>>(status);
    absl::StatusOr<v1::ZeroStateDict> state = v1::ZeroStateDict();
    if (model.ok() && (step + 1) % kEvery == 0) {
      status = OnEveryRank(
          [&](int r) { return zero_[r].ConsolidateStateDict(0).status(); });
      state = status.ok() ? zero_[0].GetStateDict()
                          : absl::StatusOr<v1::ZeroStateDict>(status);
    }
    if (model.ok() && state.ok()) {
      ++step;
      finished = step;
      ++progress;
      // A step trained again gives what it gave the first time.
      auto [it, first_time] = models.emplace(step, *model);
      for (size_t p = 0; p < it->second.size() && !first_time; ++p) {
        ASSERT_TRUE(testing::SameBytes((*model)[p], it->second[p]))
            << "step " << step << " parameter " << p;
      }
      if (step % kEvery == 0) {
        auto [saved, new_state] =
            states.emplace(step, testing::CanonicalBytes(*state));
        ASSERT_TRUE(new_state ||
                    saved->second == testing::CanonicalBytes(*state))
            << "the state after step " << step;
      }
      continue;
    }
    // A rank died: once both are back, the group resumes where they agree.
    int attempts = 0;
    while (true) {
      ASSERT_TRUE(testing::PollUntil(
          [&] {
            return attempts > 0 || generation > seen_generation ||
                   failed_restarts > 0;
          },
          absl::Seconds(60)))
          << "step " << step << " failed without a kill: " << model.status()
          << " " << state.status();
      ASSERT_EQ(failed_restarts, 0);
      seen_generation = generation;
      // Both daemons answer before the collective Create (a rank whose
      // call fails at once would leave the other waiting for the timeout).
      testing::PollUntil(
          [&] {
            for (int r = 0; r < kWorld; ++r) {
              if (absl::IsUnavailable(zero_[r].Get().status())) return false;
            }
            return true;
          },
          absl::Seconds(30));
      std::vector<int64_t> resumed(kWorld, -1);
      absl::Status created = OnEveryRank([&](int r) {
        absl::StatusOr<v1::ZeroInfo> info = zero_[r].Create(spec_);
        if (info.ok()) resumed[r] = info->steps();
        return info.status();
      });
      ASSERT_FALSE(absl::StrContains(created.message(), "group step"))
          << "the ranks could not agree on a group step: " << created;
      if (!created.ok()) {
        std::cerr << absl::FormatTime("%H:%M:%E3S", absl::Now(),
                                      absl::LocalTimeZone())
                  << " resuming at step " << step << ", generation "
                  << seen_generation << ": " << created << "\n";
        // Killed again meanwhile, or the group not formed yet.
        ASSERT_LT(++attempts, 600) << created;
        absl::SleepFor(absl::Milliseconds(100));
        continue;
      }
      ASSERT_EQ(resumed[0], resumed[1]);
      step = resumed[0];
      finished = step;
      ++resumes;
      // The model and the state are those recorded at that step (unless
      // the kill came between the step and its recording: the steps after
      // it are still compared when trained again).
      auto recorded = models.find(step);
      if (recorded == models.end()) {
        ++resumes_at_an_unrecorded_step;
        break;
      }
      for (int r = 0; r < kWorld; ++r) {
        absl::StatusOr<std::vector<Tensor>> now = ReadModel(r);
        if (!now.ok()) break;  // Killed again: found at the next step.
        for (size_t p = 0; p < now->size(); ++p) {
          ASSERT_TRUE(testing::SameBytes((*now)[p], recorded->second[p]))
              << "rank " << r << " resumed at step " << step << ", parameter "
              << p;
        }
      }
      auto saved = states.find(step);
      if (saved != states.end()) {
        absl::Status consolidated = OnEveryRank(
            [&](int r) { return zero_[r].ConsolidateStateDict(0).status(); });
        absl::StatusOr<v1::ZeroStateDict> now =
            consolidated.ok() ? zero_[0].GetStateDict()
                              : absl::StatusOr<v1::ZeroStateDict>(consolidated);
        if (now.ok()) {
          ASSERT_EQ(testing::CanonicalBytes(*now), saved->second)
              << "the state resumed at step " << step;
          ++resumes_checked_against_a_state;
        }
      }
      break;
    }
  }
  done = true;
  chaos.join();
  EXPECT_LE(resumes_at_an_unrecorded_step, 2);
  EXPECT_EQ(failed_restarts, 0);
  EXPECT_EQ(generation, kKills);
  std::cout << "zero chaos: " << generation << " kills of both ranks, "
            << kills_in_a_save << " ranks killed during a save, " << resumes
            << " resumes, " << resumes_checked_against_a_state
            << " checked against a recorded state, "
            << resumes_at_an_unrecorded_step << " at an unrecorded step\n";
  EXPECT_GE(resumes, kKills / 2);  // Kills during a resume merge.
  EXPECT_GT(resumes_checked_against_a_state, 0);
  ExpectRanksHoldTheSameModel();
  EXPECT_GE(TestAccuracy(), 0.95);
}

}  // namespace
}  // namespace distopt
