#include "server/optim/testing/golden_parity.h"

#include <cmath>
#include <cstring>

#include "common/cpu_backend.h"
#include "common/half.h"
#include "gtest/gtest.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/registry.h"

namespace distopt {
namespace {

// fp32: within 1e-6 relative, or 1e-7 absolute near zero.
::testing::AssertionResult CloseFloat(float actual, float expected) {
  const float difference = std::fabs(actual - expected);
  if (difference <= 1e-6f * std::fabs(expected) || difference <= 1e-7f) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << actual << " vs torch " << expected
                                       << " (difference " << difference << ")";
}

// Half precision: within one unit in the last place.
::testing::AssertionResult CloseHalf(uint16_t actual, float expected,
                                     DType dtype) {
  const uint16_t want = dtype == DType::kFloat16 ? FloatToHalf(expected)
                                                 : FloatToBFloat16(expected);
  // Sign-magnitude to a monotonic integer line.
  auto ordered = [](uint16_t bits) {
    return (bits & 0x8000u) ? -static_cast<int>(bits & 0x7fffu)
                            : static_cast<int>(bits);
  };
  if (std::abs(ordered(actual) - ordered(want)) <= 1) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "bits 0x" << std::hex << actual << " vs torch 0x" << want;
}

Tensor MakeTensor(DType dtype, const Shape& shape,
                  const std::vector<float>& values) {
  Tensor t = *Tensor::AllocateHost(dtype, shape);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kFloat32) {
      t.host_span<float>()[i] = values[i];
    } else if (dtype == DType::kFloat16) {
      t.host_span<uint16_t>()[i] = FloatToHalf(values[i]);
    } else {
      t.host_span<uint16_t>()[i] = FloatToBFloat16(values[i]);
    }
  }
  return t;
}

}  // namespace

void ExpectMatchesGolden(const GoldenCase& golden, const Device& device) {
  static auto* registry = OptimizerRegistry::WithBuiltins().release();
  std::shared_ptr<Backend> backend = *GetBackend(device);
  absl::StatusOr<const OptimizerKind*> kind = registry->Find(golden.kind);
  ASSERT_TRUE(kind.ok()) << kind.status();
  std::vector<ParameterLayout> layouts;
  std::vector<Tensor> params;
  for (size_t i = 0; i < golden.shapes.size(); ++i) {
    layouts.push_back({golden.dtype, golden.shapes[i]});
    params.push_back(
        *MakeTensor(golden.dtype, golden.shapes[i], golden.initial_params[i])
             .CloneTo(backend));
  }
  absl::StatusOr<std::unique_ptr<FunctionalOptimizer>> optimizer =
      FunctionalOptimizer::Create(*kind, golden.hyperparameters, layouts,
                                  device);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();

  for (size_t s = 0; s < golden.steps.size(); ++s) {
    const GoldenStep& step = golden.steps[s];
    std::vector<Tensor> grads;
    std::vector<Tensor*> param_ptrs;
    std::vector<const Tensor*> grad_ptrs;
    grads.reserve(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      param_ptrs.push_back(&params[i]);
      if (step.grads[i].has_value()) {
        grads.push_back(
            MakeTensor(golden.dtype, golden.shapes[i], *step.grads[i]));
        grad_ptrs.push_back(&grads.back());
      } else {
        grad_ptrs.push_back(nullptr);
      }
    }
    ASSERT_TRUE((*optimizer)->Step(param_ptrs, grad_ptrs).ok());

    for (size_t i = 0; i < params.size(); ++i) {
      SCOPED_TRACE(::testing::Message()
                   << golden.name << ", step " << s + 1 << ", parameter " << i);
      const std::vector<float>& want = step.expected_params[i];
      const Tensor param = *params[i].CloneTo(CpuBackend());
      for (size_t e = 0; e < want.size(); ++e) {
        if (golden.dtype == DType::kFloat32) {
          ASSERT_TRUE(CloseFloat(param.host_span<float>()[e], want[e]))
              << "element " << e;
        } else {
          ASSERT_TRUE(
              CloseHalf(param.host_span<uint16_t>()[e], want[e], golden.dtype))
              << "element " << e;
        }
      }
      const ParameterState& state = (*optimizer)->state(i);
      const bool torch_has_state =
          i < step.expected_state.size() && !step.expected_state[i].empty();
      if (i < step.expected_steps.size() && step.expected_steps[i]) {
        EXPECT_EQ(state.step, *step.expected_steps[i]);
      } else if ((*kind)->has_step_state()) {
        EXPECT_EQ(state.step, 0) << "torch has no state yet";
      }
      if (!torch_has_state) {
        EXPECT_TRUE(state.buffers.empty()) << "torch has no state yet";
        continue;
      }
      const auto& expected_state = step.expected_state[i];
      ASSERT_EQ(state.buffers.size(), expected_state.size());
      for (const auto& [name, device_buffer] : state.buffers) {
        const Tensor buffer = *device_buffer.CloneTo(CpuBackend());
        auto it = expected_state.find(name);
        ASSERT_NE(it, expected_state.end()) << "torch has no state " << name;
        for (size_t e = 0; e < it->second.size(); ++e) {
          ASSERT_TRUE(CloseFloat(buffer.host_span<float>()[e], it->second[e]))
              << name << " element " << e;
        }
      }
    }
  }
}

std::vector<GoldenCase> LoadGoldenCasesOrFail() {
  absl::StatusOr<std::vector<GoldenCase>> cases =
      ReadGoldenCases(GoldenFilePath());
  if (!cases.ok()) {
    ADD_FAILURE() << cases.status();
    return {};
  }
  return *cases;
}

}  // namespace distopt
