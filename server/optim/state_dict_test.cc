#include <cstring>
#include <functional>

#include "common/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/registry.h"
#include "server/optim/wire_optimizer.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

const OptimizerRegistry& Registry() {
  static auto* registry = OptimizerRegistry::WithBuiltins().release();
  return *registry;
}

Tensor Values(const Shape& shape, float start, float step) {
  Tensor t = *Tensor::AllocateHost(DType::kFloat32, shape);
  float value = start;
  for (float& x : t.host_span<float>()) {
    x = value;
    value += step;
  }
  return t;
}

bool Same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), a.byte_size()) == 0;
}

class StateDictTest : public ::testing::Test {
 protected:
  std::unique_ptr<FunctionalOptimizer> Make(const std::string& kind) {
    return *FunctionalOptimizer::Create(*Registry().Find(kind), {{"lr", 0.05}},
                                        {{DType::kFloat32, {2, 3}},
                                         {DType::kFloat32, {}},
                                         {DType::kFloat32, {5}}});
  }
  void Steps(FunctionalOptimizer& optimizer, std::vector<Tensor>& params,
             int first, int count) {
    for (int s = first; s < first + count; ++s) {
      Tensor g0 = Values({2, 3}, 0.1f * s, -0.05f);
      Tensor g1 = Values({}, -0.3f * s, 0);
      Tensor g2 = Values({5}, 0.2f, 0.1f * s);
      // Parameter 2 has no gradient in the first two steps.
      ASSERT_TRUE(optimizer
                      .Step({&params[0], &params[1], &params[2]},
                            {&g0, &g1, s < 2 ? nullptr : &g2})
                      .ok());
    }
  }
  std::vector<Tensor> Params() {
    return {Values({2, 3}, 1, 0.5f), Values({}, -2, 0), Values({5}, 3, -1)};
  }
};

TEST_F(StateDictTest, RoundTripThroughProtoContinuesIdentically) {
  for (const std::string& kind : Registry().Names()) {
    SCOPED_TRACE(kind);
    auto original = Make(kind);
    std::vector<Tensor> params = Params();
    Steps(*original, params, 0, 3);
    absl::StatusOr<OptimizerStateDict> dict = original->StateDict(kind);
    ASSERT_TRUE(dict.ok());
    v1::OptimizerStateDict proto;
    StateDictToProto(*dict, &proto);
    absl::StatusOr<OptimizerStateDict> back = StateDictFromProto(proto);
    ASSERT_TRUE(back.ok()) << back.status();

    auto restored = Make(kind);
    ASSERT_TRUE(restored->LoadStateDict(kind, *back).ok());
    std::vector<Tensor> copies;
    for (const Tensor& p : params) copies.push_back(*p.CloneTo(CpuBackend()));
    Steps(*original, params, 3, 3);
    Steps(*restored, copies, 3, 3);
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(Same(params[i], copies[i])) << "parameter " << i;
      // SGD keeps no step in torch's state dict, so none is restored.
      if (original->kind().has_step_state()) {
        EXPECT_EQ(original->state(i).step, restored->state(i).step);
      }
    }
  }
}

TEST_F(StateDictTest, HasTorchsLayout) {
  auto adam = Make("adam");
  std::vector<Tensor> params = Params();
  Steps(*adam, params, 0, 1);  // Parameter 2 has no state yet.
  OptimizerStateDict dict = *adam->StateDict("adam");
  ASSERT_EQ(dict.param_groups.size(), 1u);
  EXPECT_EQ(dict.param_groups[0].params, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(std::get<double>(dict.param_groups[0].hyperparameters.at("lr")),
            0.05);
  ASSERT_EQ(dict.state.size(), 2u);
  EXPECT_EQ(dict.state.at(0).step, 1);
  ASSERT_EQ(dict.state.at(0).buffers.size(), 2u);
  EXPECT_EQ(dict.state.at(0).buffers[0].first, "exp_avg");
  EXPECT_EQ(dict.state.at(0).buffers[1].first, "exp_avg_sq");
  EXPECT_EQ(dict.state.count(2), 0u);

  auto sgd = *FunctionalOptimizer::Create(
      *Registry().Find("sgd"), {{"momentum", 0.9}}, {{DType::kFloat32, {2}}});
  Tensor p = Values({2}, 1, 1);
  Tensor g = Values({2}, 1, 1);
  ASSERT_TRUE(sgd->Step({&p}, {&g}).ok());
  OptimizerStateDict sgd_dict = *sgd->StateDict("sgd");
  EXPECT_FALSE(sgd_dict.state.at(0).step.has_value());
  EXPECT_EQ(sgd_dict.state.at(0).buffers[0].first, "momentum_buffer");
}

TEST_F(StateDictTest, MismatchesAreRefusedAndKeepTheOldState) {
  auto adam = Make("adam");
  std::vector<Tensor> params = Params();
  Steps(*adam, params, 0, 3);
  const OptimizerStateDict good = *adam->StateDict("adam");
  struct Case {
    std::string what;
    std::function<void(OptimizerStateDict&)> edit;
    std::string kind;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"kind", [](OptimizerStateDict&) {}, "adamw", "state_dict.kind"},
      {"groups", [](OptimizerStateDict& d) { d.param_groups.push_back({}); },
       "adam", "expected 1"},
      {"count",
       [](OptimizerStateDict& d) { d.param_groups[0].params.pop_back(); },
       "adam", "2 parameters; expected 3"},
      {"index", [](OptimizerStateDict& d) { d.state[7] = d.state.at(0); },
       "adam", "state_dict.state[7]"},
      {"shape",
       [](OptimizerStateDict& d) {
         d.state.at(0).buffers[0].second =
             *Tensor::AllocateHost(DType::kFloat32, {6});
       },
       "adam", "exp_avg: float32[6] on cpu; expected float32[2, 3]"},
      {"missing",
       [](OptimizerStateDict& d) { d.state.at(1).buffers.pop_back(); }, "adam",
       "missing \"exp_avg_sq\""},
      {"extra",
       [](OptimizerStateDict& d) {
         d.state.at(1).buffers.emplace_back(
             "max_exp_avg_sq", *Tensor::AllocateHost(DType::kFloat32, {}));
       },
       "adam", "3 state tensors; expected 2"},
      {"step", [](OptimizerStateDict& d) { d.state.at(0).step = -1; }, "adam",
       "step"},
      {"no step", [](OptimizerStateDict& d) { d.state.at(0).step.reset(); },
       "adam", "step"},
      {"hyperparameter",
       [](OptimizerStateDict& d) {
         d.param_groups[0].hyperparameters["lr"] = -1.0;
       },
       "adam", "lr >= 0"},
  };
  for (const Case& c : cases) {
    OptimizerStateDict broken = good;
    for (auto& [index, entry] : broken.state) {
      for (auto& buffer : entry.buffers) {
        buffer.second = *buffer.second.CloneTo(CpuBackend());
      }
    }
    c.edit(broken);
    absl::Status status = adam->LoadStateDict(c.kind, broken);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.what;
  }
  // Unchanged: the state still equals the good one.
  const OptimizerStateDict after = *adam->StateDict("adam");
  ASSERT_EQ(after.state.size(), good.state.size());
  for (const auto& [index, entry] : good.state) {
    EXPECT_EQ(after.state.at(index).step, entry.step);
    for (size_t b = 0; b < entry.buffers.size(); ++b) {
      EXPECT_TRUE(Same(after.state.at(index).buffers[b].second,
                       entry.buffers[b].second));
    }
  }
  EXPECT_EQ(adam->hyperparameters().number("lr"), 0.05);
}

TEST(StateDictProtoTest, RejectsMalformedTensorsAndValues) {
  v1::OptimizerStateDict proto;
  proto.set_kind("adam");
  v1::ParameterState* state = proto.add_state();
  state->set_index(0);
  v1::TensorProto& tensor = (*state->mutable_buffers())["exp_avg"];
  tensor.set_dtype(v1::DTYPE_FLOAT32);
  tensor.add_shape(2);
  tensor.set_data("abc");
  absl::StatusOr<OptimizerStateDict> dict = StateDictFromProto(proto);
  EXPECT_EQ(dict.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dict.status().message(),
              HasSubstr("state_dict.state[0].exp_avg"));

  v1::OptimizerStateDict empty_value;
  (*empty_value.add_param_groups()->mutable_hyperparameters())["lr"];
  EXPECT_THAT(StateDictFromProto(empty_value).status().message(),
              HasSubstr("hyperparameters.lr: no value"));
}

TEST(OptimizerKindProtoTest, DescribesHyperparametersAndState) {
  v1::OptimizerKindInfo info;
  OptimizerKindToProto("adam", **Registry().Find("adam"), &info);
  EXPECT_EQ(info.name(), "adam");
  ASSERT_EQ(info.hyperparameters_size(), 6);
  EXPECT_EQ(info.hyperparameters(0).name(), "lr");
  EXPECT_EQ(info.hyperparameters(0).default_value().number(), 1e-3);
  EXPECT_EQ(info.hyperparameters(1).default_value().pair().second(), 0.999);
  EXPECT_THAT(info.state_buffers(),
              ::testing::ElementsAre("exp_avg", "exp_avg_sq"));
  EXPECT_TRUE(info.has_step_state());
}

}  // namespace
}  // namespace distopt
