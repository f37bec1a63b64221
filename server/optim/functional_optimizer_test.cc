// Validation, skipping and hyperparameter changes of FunctionalOptimizer;
// the numbers themselves are checked against torch by cpu_parity_test.
#include "server/optim/functional_optimizer.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/optim/builtin_kinds.h"
#include "server/optim/registry.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

const OptimizerRegistry& Registry() {
  static auto* registry = OptimizerRegistry::WithBuiltins().release();
  return *registry;
}

absl::Status CreateWith(const std::string& kind,
                        absl::flat_hash_map<std::string, HyperValue> h) {
  return FunctionalOptimizer::Create(*Registry().Find(kind), h,
                                     {{DType::kFloat32, {2}}})
      .status();
}

TEST(RegistryTest, HasTheEightKindsAndNamesThemOnAMiss) {
  EXPECT_THAT(Registry().Names(),
              ::testing::ElementsAre("adadelta", "adagrad", "adam", "adamax",
                                     "adamw", "rmsprop", "rprop", "sgd"));
  absl::StatusOr<const OptimizerKind*> missing = Registry().Find("lamb");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("expected one of adadelta, adagrad, adam"));
}

TEST(RegistryTest, RegistersOnlyNewNames) {
  auto registry = OptimizerRegistry::WithBuiltins();
  const OptimizerKind* adam = *registry->Find("adam");
  EXPECT_FALSE(registry->Register("adam", MakeSgd()));
  EXPECT_EQ(*registry->Find("adam"), adam);
  EXPECT_TRUE(registry->Register("my_sgd", MakeSgd()));
  EXPECT_TRUE(registry->Find("my_sgd").ok());
}

TEST(HyperparameterTest, DefaultsFollowTorch) {
  auto defaults = [](const std::string& kind) {
    return *ResolveHyperparameters((*Registry().Find(kind))->hyperparameters(),
                                   {});
  };
  EXPECT_EQ(defaults("sgd").number("lr"), 1e-3);
  EXPECT_EQ(defaults("adam").pair("betas"), std::make_pair(0.9, 0.999));
  EXPECT_EQ(defaults("adam").number("weight_decay"), 0.0);
  EXPECT_EQ(defaults("adamw").number("weight_decay"), 1e-2);
  EXPECT_EQ(defaults("adagrad").number("eps"), 1e-10);
  EXPECT_EQ(defaults("adadelta").number("lr"), 1.0);
  EXPECT_EQ(defaults("adamax").number("lr"), 2e-3);
  EXPECT_EQ(defaults("rmsprop").number("alpha"), 0.99);
  EXPECT_EQ(defaults("rprop").pair("step_sizes"), std::make_pair(1e-6, 50.0));
}

TEST(HyperparameterTest, RejectsWhatTorchRejects) {
  struct Case {
    std::string kind;
    absl::flat_hash_map<std::string, HyperValue> h;
    std::string message;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {"sgd", {{"lr", -0.1}}, "hyperparameters.lr: invalid value -0.1"},
      {"sgd", {{"momentum", -1.0}}, "momentum >= 0"},
      {"sgd", {{"weight_decay", -1.0}}, "weight_decay >= 0"},
      {"sgd", {{"nesterov", true}}, "Nesterov momentum requires"},
      {"sgd",
       {{"nesterov", true}, {"momentum", 0.9}, {"dampening", 0.1}},
       "zero dampening"},
      {"adam", {{"eps", -1e-8}}, "eps >= 0"},
      {"adam", {{"betas", std::make_pair(1.0, 0.999)}}, "betas[0] < 1"},
      {"adam", {{"betas", std::make_pair(0.9, -0.1)}}, "0 <= betas[1]"},
      {"adamw", {{"lr", -1.0}}, "lr >= 0"},
      {"adagrad", {{"lr_decay", -1.0}}, "lr_decay >= 0"},
      {"adagrad",
       {{"initial_accumulator_value", -1.0}},
       "initial_accumulator_value >= 0"},
      {"adadelta", {{"rho", 1.5}}, "rho <= 1"},
      {"adamax", {{"betas", std::make_pair(0.9, 1.0)}}, "betas[1] < 1"},
      {"rmsprop", {{"alpha", -0.5}}, "alpha >= 0"},
      {"rmsprop", {{"momentum", -0.5}}, "momentum >= 0"},
      {"rprop", {{"etas", std::make_pair(1.5, 1.2)}}, "0 < etas[0] < 1"},
      {"rprop", {{"etas", std::make_pair(0.5, 0.9)}}, "1 < etas[1]"},
      {"rprop", {{"step_sizes", std::make_pair(1.0, 0.1)}}, "step_sizes"},
      {"adam", {{"lr", nan}}, "hyperparameters.lr: nan is not finite"},
      {"adam", {{"betas", std::make_pair(0.9, inf)}}, "not finite"},
      {"adam", {{"learning_rate", 0.1}}, "unknown hyperparameter"},
      {"adam", {{"amsgrad", 1.0}}, "a number; expected a bool"},
      {"sgd", {{"lr", true}}, "a bool; expected a number"},
  };
  for (const Case& c : cases) {
    absl::Status status = CreateWith(c.kind, c.h);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << c.kind << ": " << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.kind;
  }
  EXPECT_THAT(CreateWith("adam", {{"learning_rate", 0.1}}).message(),
              HasSubstr("expected one of lr, betas, eps"));
}

// State is reserved whole at creation, and grown before hyperparameters or
// a loaded state dict that need more are taken; refused, nothing changes.
TEST(FunctionalOptimizerTest, StateIsReservedInTheBudget) {
  auto registry = OptimizerRegistry::WithBuiltins();
  MemoryBudget budget(0, 1000);
  const std::vector<ParameterLayout> layouts = {{DType::kFloat32, {100}}};
  // SGD without momentum keeps nothing; with it, 400 bytes.
  auto sgd = FunctionalOptimizer::Create(*registry->Find("sgd"), {{"lr", 0.1}},
                                         layouts, Device::Cpu(), &budget);
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  EXPECT_EQ(budget.used_bytes(), 0u);
  ASSERT_TRUE((*sgd)->SetHyperparameters({{"momentum", 0.9}}).ok());
  EXPECT_EQ(budget.used_bytes(), 400u);
  // Adam needs 800 more: refused, and the budget is as it was.
  auto adam = FunctionalOptimizer::Create(*registry->Find("adam"), {}, layouts,
                                          Device::Cpu(), &budget);
  EXPECT_EQ(adam.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(adam.status().message(), HasSubstr("the optimizer's state"));
  EXPECT_EQ(budget.used_bytes(), 400u);
  // Momentum off gives the bytes back; a state dict with momentum on takes
  // them again.
  absl::StatusOr<OptimizerStateDict> with_momentum = (*sgd)->StateDict("sgd");
  ASSERT_TRUE(with_momentum.ok());
  ASSERT_TRUE((*sgd)->SetHyperparameters({{"momentum", 0.0}}).ok());
  EXPECT_EQ(budget.used_bytes(), 0u);
  MemoryBudget tight(0, 100);
  auto small = FunctionalOptimizer::Create(
      *registry->Find("sgd"), {{"lr", 0.1}}, layouts, Device::Cpu(), &tight);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->SetHyperparameters({{"momentum", 0.9}}).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*small)->hyperparameters().number("momentum"), 0.0);
  EXPECT_EQ((*small)->LoadStateDict("sgd", *with_momentum).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(tight.used_bytes(), 0u);
}

TEST(FunctionalOptimizerTest, RejectsIntegerParameters) {
  absl::Status status = FunctionalOptimizer::Create(*Registry().Find("sgd"), {},
                                                    {{DType::kInt64, {2}}})
                            .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("params[0]: int64"));
}

class StepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    optimizer_ = *FunctionalOptimizer::Create(
        *Registry().Find("adam"), {{"lr", 0.1}},
        {{DType::kFloat32, {3}}, {DType::kFloat32, {2}}});
    a_ = Filled({3}, 1.0f);
    b_ = Filled({2}, 2.0f);
    ga_ = Filled({3}, 0.5f);
    gb_ = Filled({2}, -0.5f);
  }
  static Tensor Filled(const Shape& shape, float value) {
    Tensor t = *Tensor::AllocateHost(DType::kFloat32, shape);
    for (float& x : t.host_span<float>()) x = value;
    return t;
  }
  std::unique_ptr<FunctionalOptimizer> optimizer_;
  Tensor a_, b_, ga_, gb_;
};

TEST_F(StepTest, SkipsParametersWithoutGradient) {
  ASSERT_TRUE(optimizer_->Step({&a_, &b_}, {&ga_, nullptr}).ok());
  EXPECT_NE(a_.host_span<float>()[0], 1.0f);
  EXPECT_EQ(b_.host_span<float>()[0], 2.0f);
  EXPECT_EQ(optimizer_->state(0).step, 1);
  EXPECT_EQ(optimizer_->state(1).step, 0);
  EXPECT_TRUE(optimizer_->state(1).buffers.empty());
  ASSERT_TRUE(optimizer_->Step({&a_, &b_}, {&ga_, &gb_}).ok());
  EXPECT_EQ(optimizer_->state(0).step, 2);
  EXPECT_EQ(optimizer_->state(1).step, 1);
  EXPECT_EQ(optimizer_->state(1).buffers.size(), 2u);
}

TEST_F(StepTest, ARefusedStepChangesNothing) {
  Tensor wrong = Filled({4}, 0.5f);
  absl::Status status = optimizer_->Step({&a_, &b_}, {&ga_, &wrong});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("grads[1]"));
  EXPECT_EQ(a_.host_span<float>()[0], 1.0f);
  EXPECT_EQ(optimizer_->state(0).step, 0);
  EXPECT_EQ(optimizer_->Step({&a_}, {&ga_}).code(),
            absl::StatusCode::kInvalidArgument);
  Tensor half = *Tensor::AllocateHost(DType::kFloat16, {3});
  EXPECT_THAT(optimizer_->Step({&half, &b_}, {&ga_, &gb_}).message(),
              HasSubstr("params[0]"));
}

TEST_F(StepTest, SetHyperparametersIsAllOrNothing) {
  ASSERT_TRUE(optimizer_->SetHyperparameters({{"lr", 0.01}}).ok());
  EXPECT_EQ(optimizer_->hyperparameters().number("lr"), 0.01);
  absl::Status status =
      optimizer_->SetHyperparameters({{"lr", 0.5}, {"eps", -1.0}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(optimizer_->hyperparameters().number("lr"), 0.01);
  // A learning rate schedule: the same gradients move less with a lower lr.
  Tensor c = Filled({3}, 1.0f);
  Tensor d = Filled({2}, 2.0f);
  ASSERT_TRUE(optimizer_->Step({&a_, &b_}, {&ga_, &gb_}).ok());
  auto slow = *FunctionalOptimizer::Create(
      *Registry().Find("adam"), {{"lr", 0.001}},
      {{DType::kFloat32, {3}}, {DType::kFloat32, {2}}});
  ASSERT_TRUE(slow->Step({&c, &d}, {&ga_, &gb_}).ok());
  EXPECT_LT(1.0f - c.host_span<float>()[0], 1.0f - a_.host_span<float>()[0]);
}

TEST(SgdTest, MomentumTurnedOnLaterStartsFromTheGradient) {
  auto sgd = *FunctionalOptimizer::Create(
      *Registry().Find("sgd"), {{"lr", 1.0}}, {{DType::kFloat32, {1}}});
  Tensor p = *Tensor::AllocateHost(DType::kFloat32, {1});
  Tensor g = *Tensor::AllocateHost(DType::kFloat32, {1});
  p.host_span<float>()[0] = 0;
  g.host_span<float>()[0] = 1;
  ASSERT_TRUE(sgd->Step({&p}, {&g}).ok());
  ASSERT_TRUE(sgd->SetHyperparameters({{"momentum", 0.9}}).ok());
  ASSERT_TRUE(sgd->Step({&p}, {&g}).ok());
  // As torch: a new buffer is a copy of the gradient, not 0.9 * 0 + g.
  EXPECT_EQ(sgd->state(0).buffers[0].second.host_span<float>()[0], 1.0f);
  EXPECT_EQ(p.host_span<float>()[0], -2.0f);
}

// A parameter stepped slice by slice (as a gradient-sharded ZeRO step
// does with one cut across buckets) ends bit for bit where whole steps
// take it, for every kind and in fp32 and bf16: the slices share the
// step's count, and the state made by the first (SGD's momentum buffer,
// which a fresh state treats specially) counts as fresh for the rest.
// Slices of a large parameter are split across threads at offsets within
// the slice.
struct SlicedModel {
  int64_t elements;
  std::vector<std::pair<int64_t, int64_t>> slices;  // (begin, count)
};

class StepSliceTest : public ::testing::TestWithParam<SlicedModel> {};

TEST_P(StepSliceTest, SlicesInTurnStepAsOneStep) {
  const int64_t n = GetParam().elements;
  const auto& slices = GetParam().slices;
  for (const std::string& kind : Registry().Names()) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      SCOPED_TRACE(absl::StrCat(kind, " ", DTypeName(dtype)));
      absl::flat_hash_map<std::string, HyperValue> h = {{"lr", 0.01}};
      if (kind == "sgd") {
        // A fresh buffer is the gradient, not (1 - dampening) times it.
        h["momentum"] = 0.9;
        h["dampening"] = 0.3;
      }
      auto whole = *FunctionalOptimizer::Create(*Registry().Find(kind), h,
                                                {{dtype, {n}}});
      auto sliced = *FunctionalOptimizer::Create(*Registry().Find(kind), h,
                                                 {{dtype, {n}}});
      std::vector<float> start(n);
      for (int64_t i = 0; i < n; ++i) start[i] = std::sin(1.0f + i);
      Tensor a = *Tensor::AllocateHost(dtype, {n});
      Tensor b = *Tensor::AllocateHost(dtype, {n});
      NarrowFromFloat(start, dtype, a.data());
      NarrowFromFloat(start, dtype, b.data());
      for (int step = 0; step < 3; ++step) {
        std::vector<float> values(n);
        for (int64_t i = 0; i < n; ++i) values[i] = std::cos(0.7f * i + step);
        Tensor g = *Tensor::AllocateHost(dtype, {n});
        NarrowFromFloat(values, dtype, g.data());
        ASSERT_TRUE(whole->Step({&a}, {&g}).ok());
        for (const auto& [begin, count] : slices) {
          Tensor slice = Tensor::Borrow(
              static_cast<char*>(g.data()) + begin * ElementSize(dtype), dtype,
              {count}, Device::Cpu());
          ASSERT_TRUE(sliced->StepSlice(0, b, begin, slice).ok()) << begin;
        }
      }
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.byte_size()), 0);
      EXPECT_EQ(sliced->state(0).step, whole->state(0).step);
      ASSERT_EQ(sliced->state(0).buffers.size(),
                whole->state(0).buffers.size());
      for (size_t k = 0; k < whole->state(0).buffers.size(); ++k) {
        const Tensor& x = whole->state(0).buffers[k].second;
        const Tensor& y = sliced->state(0).buffers[k].second;
        EXPECT_EQ(std::memcmp(x.data(), y.data(), x.byte_size()), 0)
            << whole->state(0).buffers[k].first;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, StepSliceTest,
    ::testing::Values(SlicedModel{10, {{0, 3}, {3, 4}, {7, 3}}},
                      // Over two of the CPU's parallel ranges (65536).
                      SlicedModel{200003, {{0, 70001}, {70001, 130002}}}),
    [](const ::testing::TestParamInfo<SlicedModel>& info) {
      return absl::StrCat("elements", info.param.elements);
    });

// A slice out of turn, or one that does not fit the parameter, is refused
// with the field named, and changes nothing; a step left unfinished is
// over once a slice from element 0 begins the next.
TEST_F(StepTest, AStepSliceOutOfTurnIsRefused) {
  Tensor slice = Filled({2}, 0.5f);
  absl::Status status = optimizer_->StepSlice(0, a_, 1, slice);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              HasSubstr("grads[0]: a slice from element 1; expected the "
                        "step's first slice, from element 0"));
  EXPECT_EQ(a_.host_span<float>()[1], 1.0f);
  EXPECT_EQ(optimizer_->state(0).step, 0);
  Tensor too_long = Filled({3}, 0.5f);
  status = optimizer_->StepSlice(0, a_, 1, too_long);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("expected a slice of 1 to 3"));
  EXPECT_THAT(optimizer_->StepSlice(2, a_, 0, slice).message(),
              HasSubstr("params[2]: no such parameter; expected 0 to 1"));
  EXPECT_THAT(optimizer_->StepSlice(1, a_, 0, slice).message(),
              HasSubstr("params[1]"));
  Tensor narrow = *Tensor::AllocateHost(DType::kFloat16, {2});
  EXPECT_THAT(optimizer_->StepSlice(0, a_, 0, narrow).message(),
              HasSubstr("grads[0]: "));
  EXPECT_EQ(optimizer_->state(0).step, 0);

  ASSERT_TRUE(optimizer_->StepSlice(0, a_, 0, slice).ok());
  EXPECT_EQ(optimizer_->state(0).step, 1);
  EXPECT_NE(a_.host_span<float>()[1], 1.0f);
  EXPECT_EQ(a_.host_span<float>()[2], 1.0f);
  status = optimizer_->StepSlice(0, a_, 1, slice);
  EXPECT_THAT(status.message(), HasSubstr("expected the slice from element 2"));
  ASSERT_TRUE(optimizer_->StepSlice(0, a_, 0, slice).ok());
  EXPECT_EQ(optimizer_->state(0).step, 2);
  // Hyperparameters changed in the middle of a step end it.
  ASSERT_TRUE(optimizer_->SetHyperparameters({{"lr", 0.01}}).ok());
  status = optimizer_->StepSlice(0, a_, 2, Filled({1}, 0.5f));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a_.host_span<float>()[2], 1.0f);
}

}  // namespace
}  // namespace distopt
