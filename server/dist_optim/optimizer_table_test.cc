#include "server/dist_optim/optimizer_table.h"

#include <atomic>
#include <limits>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/cpu_backend.h"
#include "common/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

// A kind whose update waits (up to `wait`) until `expected` updates are
// running at once, and records the most it saw: it shows whether steps
// overlap without relying on timing for the verdict.
class ProbeKind : public OptimizerKind {
 public:
  ProbeKind(int expected, absl::Duration wait)
      : expected_(expected), wait_(wait) {}

  const std::vector<HyperparameterSpec>& hyperparameters() const override {
    static const auto* specs = new std::vector<HyperparameterSpec>{};
    return *specs;
  }
  absl::Status Validate(const Hyperparameters&) const override {
    return absl::OkStatus();
  }
  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters&) const override {
    return {};
  }
  void Update(const UpdateArgs& a) const override {
    absl::MutexLock lock(&mutex_);
    ++inside_;
    most_ = std::max(most_, inside_);
    mutex_.AwaitWithTimeout(absl::Condition(
                                +[](const ProbeKind* self) {
                                  return self->most_ >= self->expected_;
                                },
                                this),
                            wait_);
    for (int64_t i = 0; i < a.count; ++i) a.param[i] -= a.grad[i];
    --inside_;
  }
  int most() const {
    absl::MutexLock lock(&mutex_);
    return most_;
  }

 private:
  const int expected_;
  const absl::Duration wait_;
  mutable absl::Mutex mutex_;
  mutable int inside_ = 0;
  mutable int most_ = 0;
};

class OptimizerTableTest : public ::testing::Test {
 protected:
  uint64_t NewParameter(const std::string& name, int64_t size, double value) {
    CreateParameterSpec spec;
    spec.name = name;
    spec.shape = {size};
    spec.initializer = ConstantInit{value};
    return store_.Create(spec)->id;
  }
  std::vector<float> Values(uint64_t id) {
    std::shared_ptr<Parameter> p = *store_.Find(ParameterKey::ById(id));
    const ParameterInfo info = p->Info();
    std::vector<float> out(info.num_elements);
    EXPECT_TRUE(p->ReadBytes(info.version, 0, info.byte_size, out.data()).ok());
    return out;
  }
  void Push(uint64_t context, uint64_t parameter, float value, int64_t size) {
    Tensor g = *Tensor::AllocateHost(DType::kFloat32, {size});
    for (float& x : g.host_span<float>()) x = value;
    GradientUpdate update;
    std::shared_ptr<Parameter> target =
        *store_.Find(ParameterKey::ById(parameter));
    update.parameter = target.get();
    update.dense = std::move(g);
    ASSERT_TRUE((*contexts_.GetOrCreate(context))
                    ->Accumulate({update}, CpuBackend(), budget_)
                    .ok());
  }

  MemoryBudget budget_{0, 0};
  ParameterStore store_{CpuBackend(), &budget_};
  ContextTable contexts_{absl::Minutes(10), &budget_};
  std::unique_ptr<OptimizerRegistry> kinds_ = OptimizerRegistry::WithBuiltins();
  OptimizerTable table_{&store_, &contexts_, kinds_.get()};
};

TEST_F(OptimizerTableTest, CreationChecksEverythingFirst) {
  const uint64_t w = NewParameter("w", 2, 1);
  EXPECT_EQ(table_.Create("lamb", {}, {w}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(table_.Create("sgd", {}, {}).status().message(),
              HasSubstr("parameter_ids: empty"));
  EXPECT_THAT(table_.Create("sgd", {}, {w, w}).status().message(),
              HasSubstr("parameter_ids[1]"));
  EXPECT_EQ(table_.Create("sgd", {}, {w, 999}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(table_.Create("sgd", {{"lr", -1.0}}, {w}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(table_.List().empty());
  absl::StatusOr<OptimizerInfo> info = table_.Create("adam", {}, {w});
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, "adam");
  EXPECT_EQ(std::get<double>(info->hyperparameters.at("lr")), 1e-3);
}

// A restored checkpoint whose next id is the last there is: new
// optimizers are refused rather than given ids that wrap around onto the
// restored ones (and replace them).
TEST_F(OptimizerTableTest, IdsNeverWrapAround) {
  const uint64_t w = NewParameter("w", 2, 1);
  std::vector<std::string> dropped;
  ASSERT_TRUE(
      table_.Restore({}, std::numeric_limits<uint64_t>::max(), &dropped).ok());
  absl::StatusOr<OptimizerInfo> info = table_.Create("sgd", {}, {w});
  EXPECT_EQ(info.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(info.status().message(), HasSubstr("no optimizer ids left"));
  EXPECT_TRUE(table_.List().empty());
}

TEST_F(OptimizerTableTest, StepAppliesTheContextsGradientsOnce) {
  const uint64_t w = NewParameter("w", 3, 1);
  const uint64_t b = NewParameter("b", 2, 5);
  const uint64_t id = table_.Create("sgd", {{"lr", 0.5}}, {w, b})->id;
  Push(/*context=*/11, w, 2.0f, 3);
  absl::StatusOr<StepResult> result = table_.Step(id, 11);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->applied);
  EXPECT_EQ(result->stepped_parameters, 1);
  EXPECT_EQ(result->skipped_parameters, 1);
  EXPECT_THAT(Values(w), ::testing::Each(0.0f));
  EXPECT_THAT(Values(b), ::testing::Each(5.0f));  // No gradient: untouched.
  EXPECT_EQ((*store_.Find(ParameterKey::ById(w)))->Info().version, 2u);
  EXPECT_EQ((*store_.Find(ParameterKey::ById(b)))->Info().version, 1u);

  // A retry after a lost reply is not applied twice.
  result = table_.Step(id, 11);
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->applied);
  EXPECT_THAT(Values(w), ::testing::Each(0.0f));
  EXPECT_EQ(table_.Get(id)->steps, 1);

  EXPECT_EQ(table_.Step(id, 12).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_.Step(id, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_.Step(77, 11).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(OptimizerTableTest, ADeletedParameterFailsTheStepCleanly) {
  const uint64_t w = NewParameter("w", 1, 1);
  const uint64_t id = table_.Create("sgd", {}, {w})->id;
  Push(3, w, 1.0f, 1);
  ASSERT_TRUE(store_.Delete(ParameterKey::ById(w)).ok());
  EXPECT_EQ(table_.Step(id, 3).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table_.Get(id)->steps, 0);
}

// distopt_optimizer_steps_total{result=...}, over every kind.
double StepsCounted(const std::string& result) {
  double total = 0;
  for (const prometheus::MetricFamily& family :
       metrics::Registry()->Collect()) {
    if (family.name != "distopt_optimizer_steps_total") continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      for (const prometheus::ClientMetric::Label& label : metric.label) {
        if (label.name == "result" && label.value == result) {
          total += metric.counter.value;
        }
      }
    }
  }
  return total;
}

// Every refused step counts as failed in /metrics: one in a context this
// daemon does not know too (it was not counted; found by a hostile probe).
TEST_F(OptimizerTableTest, RefusedStepsCountAsFailed) {
  const uint64_t w = NewParameter("w", 1, 1);
  const uint64_t id = table_.Create("sgd", {}, {w})->id;
  const double before = StepsCounted("failed");
  EXPECT_EQ(table_.Step(id, 12345).status().code(),
            absl::StatusCode::kNotFound);
  Push(3, w, 1.0f, 1);
  ASSERT_TRUE(store_.Delete(ParameterKey::ById(w)).ok());
  EXPECT_EQ(table_.Step(id, 3).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(StepsCounted("failed") - before, 2);
}

TEST_F(OptimizerTableTest, ConcurrentStepsOfOneOptimizerAllCount) {
  const uint64_t w = NewParameter("w", 1000, 0);
  const uint64_t id = table_.Create("sgd", {{"lr", 1.0}}, {w})->id;
  std::vector<std::thread> trainers;
  for (int t = 1; t <= 8; ++t) {
    trainers.emplace_back([&, t] {
      const uint64_t context = (uint64_t{static_cast<uint64_t>(t)} << 48) | 1;
      Push(context, w, static_cast<float>(t), 1000);
      for (int repeat = 0; repeat < 3; ++repeat) {  // Retries count once.
        ASSERT_TRUE(table_.Step(id, context).ok());
      }
    });
  }
  for (std::thread& trainer : trainers) trainer.join();
  // Every update landed: 0 - (1 + 2 + ... + 8).
  EXPECT_THAT(Values(w), ::testing::Each(-36.0f));
  EXPECT_EQ(table_.Get(id)->steps, 8);
}

TEST_F(OptimizerTableTest, DisjointOptimizersStepInParallel) {
  kinds_->Register("probe_parallel",
                   std::make_unique<ProbeKind>(2, absl::Seconds(20)));
  const uint64_t a = NewParameter("a", 4, 0);
  const uint64_t b = NewParameter("b", 4, 0);
  const uint64_t first = table_.Create("probe_parallel", {}, {a})->id;
  const uint64_t second = table_.Create("probe_parallel", {}, {b})->id;
  Push(1, a, 1.0f, 4);
  Push(1, b, 1.0f, 4);
  std::thread other([&] { ASSERT_TRUE(table_.Step(second, 1).ok()); });
  ASSERT_TRUE(table_.Step(first, 1).ok());
  other.join();
  const auto* probe =
      static_cast<const ProbeKind*>(*kinds_->Find("probe_parallel"));
  EXPECT_EQ(probe->most(), 2) << "the two steps did not overlap";
}

TEST_F(OptimizerTableTest, OptimizersSharingAParameterAreSerialised) {
  kinds_->Register("probe_serial",
                   std::make_unique<ProbeKind>(2, absl::Milliseconds(300)));
  const uint64_t shared = NewParameter("shared", 4, 0);
  const uint64_t first = table_.Create("probe_serial", {}, {shared})->id;
  const uint64_t second = table_.Create("probe_serial", {}, {shared})->id;
  Push(1, shared, 1.0f, 4);
  std::thread other([&] { ASSERT_TRUE(table_.Step(second, 1).ok()); });
  ASSERT_TRUE(table_.Step(first, 1).ok());
  other.join();
  const auto* probe =
      static_cast<const ProbeKind*>(*kinds_->Find("probe_serial"));
  EXPECT_EQ(probe->most(), 1) << "steps over one parameter overlapped";
  EXPECT_THAT(Values(shared), ::testing::Each(-2.0f));
}

TEST_F(OptimizerTableTest, HyperparametersAndStateDicts) {
  const uint64_t w = NewParameter("w", 2, 1);
  const uint64_t id = table_.Create("adam", {{"lr", 0.1}}, {w})->id;
  Push(1, w, 0.5f, 2);
  ASSERT_TRUE(table_.Step(id, 1).ok());
  absl::StatusOr<OptimizerInfo> changed =
      table_.SetHyperparameters(id, {{"lr", 0.01}});
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(std::get<double>(changed->hyperparameters.at("lr")), 0.01);
  EXPECT_FALSE(table_.SetHyperparameters(id, {{"betas", 0.5}}).ok());
  absl::StatusOr<OptimizerStateDict> dict = table_.GetStateDict(id);
  ASSERT_TRUE(dict.ok());
  EXPECT_EQ(dict->state.at(0).step, 1);
  ASSERT_TRUE(table_.LoadStateDict(id, *dict).ok());
  dict->kind = "sgd";
  EXPECT_FALSE(table_.LoadStateDict(id, *dict).ok());
  EXPECT_TRUE(table_.Delete(id).ok());
  EXPECT_EQ(table_.Get(id).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace distopt
