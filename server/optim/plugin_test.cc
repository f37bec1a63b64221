// The example Lion plugin, loaded from its shared library into a registry,
// against a double-precision reference of its formula.
#include <cmath>
#include <cstdlib>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/plugin_loader.h"

namespace distopt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string PluginPath(const std::string& name) {
  return std::string(std::getenv("TEST_SRCDIR")) +
         "/distopt/server/optim/plugins/" + name;
}

TEST(PluginTest, LionRegistersAndStepsAsItsFormulaSays) {
  auto registry = OptimizerRegistry::WithBuiltins();
  absl::StatusOr<PluginLoadResult> loaded =
      LoadOptimizerPlugin(PluginPath("liblion_plugin.so"), *registry);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(loaded->added, ElementsAre("lion"));
  absl::StatusOr<const OptimizerKind*> lion = registry->Find("lion");
  ASSERT_TRUE(lion.ok());

  const double lr = 0.01, beta1 = 0.8, beta2 = 0.95, weight_decay = 0.1;
  auto optimizer =
      *FunctionalOptimizer::Create(*lion,
                                   {{"lr", lr},
                                    {"betas", std::make_pair(beta1, beta2)},
                                    {"weight_decay", weight_decay}},
                                   {{DType::kFloat32, {5}}});
  Tensor param = *Tensor::AllocateHost(DType::kFloat32, {5});
  Tensor grad = *Tensor::AllocateHost(DType::kFloat32, {5});
  std::vector<double> p = {1, -2, 0.5, 3, -0.25};
  std::vector<double> m(5, 0);
  for (int i = 0; i < 5; ++i) param.host_span<float>()[i] = p[i];
  for (int step = 0; step < 4; ++step) {
    for (int i = 0; i < 5; ++i) {
      grad.host_span<float>()[i] = static_cast<float>(
          std::sin(1.0 + i + 3 * step) * (step % 2 ? -0.5 : 0.7));
    }
    ASSERT_TRUE(optimizer->Step({&param}, {&grad}).ok());
    for (int i = 0; i < 5; ++i) {
      const double g = grad.host_span<float>()[i];
      const double c = beta1 * m[i] + (1 - beta1) * g;
      p[i] = p[i] * (1 - lr * weight_decay) - lr * ((c > 0) - (c < 0));
      m[i] = beta2 * m[i] + (1 - beta2) * g;
      EXPECT_NEAR(param.host_span<float>()[i], p[i], 1e-6) << step << "/" << i;
      EXPECT_NEAR(optimizer->state(0).buffers[0].second.host_span<float>()[i],
                  m[i], 1e-6);
    }
  }
  EXPECT_THAT(FunctionalOptimizer::Create(*lion, {{"lr", -1.0}},
                                          {{DType::kFloat32, {1}}})
                  .status()
                  .message(),
              HasSubstr("lr >= 0"));
}

TEST(PluginTest, ATakenNameKeepsItsKind) {
  auto registry = OptimizerRegistry::WithBuiltins();
  ASSERT_TRUE(
      LoadOptimizerPlugin(PluginPath("liblion_plugin.so"), *registry).ok());
  const OptimizerKind* first = *registry->Find("lion");
  absl::StatusOr<PluginLoadResult> again =
      LoadOptimizerPlugin(PluginPath("liblion_plugin.so"), *registry);
  ASSERT_TRUE(again.ok());
  EXPECT_THAT(again->rejected, ElementsAre("lion"));
  EXPECT_EQ(*registry->Find("lion"), first);
}

TEST(PluginTest, BadLibrariesAreRefused) {
  auto registry = OptimizerRegistry::WithBuiltins();
  absl::StatusOr<PluginLoadResult> missing =
      LoadOptimizerPlugin("/nonexistent/plugin.so", *registry);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("--optimizer_plugin="));
  absl::StatusOr<PluginLoadResult> no_entry =
      LoadOptimizerPlugin(PluginPath("libno_entry_point.so"), *registry);
  EXPECT_EQ(no_entry.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_entry.status().message(),
              HasSubstr("DistoptRegisterOptimizerKinds"));
  EXPECT_EQ(registry->Names().size(), 8u);
}

}  // namespace
}  // namespace distopt
