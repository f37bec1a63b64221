// OptimizerService.ListOptimizerKinds on a real daemon, with and without the
// example plugin.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::PluginPath;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Names(
    const std::vector<v1::OptimizerKindInfo>& kinds) {
  std::vector<std::string> names;
  for (const auto& kind : kinds) names.push_back(kind.name());
  return names;
}

TEST(OptimizerServiceTest, ListsTheBuiltInKindsWithTheirDefaults) {
  std::unique_ptr<LocalWorker> worker = testing::StartWorkerOrDie();
  ASSERT_NE(worker, nullptr);
  Client client;
  absl::StatusOr<std::vector<v1::OptimizerKindInfo>> kinds =
      client.ListOptimizerKinds(worker->address());
  ASSERT_TRUE(kinds.ok()) << kinds.status();
  EXPECT_THAT(Names(*kinds),
              ElementsAre("adadelta", "adagrad", "adam", "adamax", "adamw",
                          "rmsprop", "rprop", "sgd"));
  for (const auto& kind : *kinds) {
    if (kind.name() != "rmsprop") continue;
    std::vector<std::string> hyperparameters;
    for (const auto& h : kind.hyperparameters()) {
      hyperparameters.push_back(h.name());
    }
    EXPECT_THAT(hyperparameters,
                ElementsAre("lr", "alpha", "eps", "weight_decay", "momentum",
                            "centered", "maximize"));
    EXPECT_EQ(kind.hyperparameters(0).default_value().number(), 1e-2);
    EXPECT_FALSE(kind.hyperparameters(5).default_value().flag());
    EXPECT_THAT(kind.state_buffers(), ElementsAre("square_avg"));
  }
}

TEST(OptimizerServiceTest, APluginAddsItsKindToARealDaemon) {
  const std::string lion = PluginPath("liblion_plugin.so");
  // Given twice: the second registration is refused, the daemon still runs.
  std::unique_ptr<LocalWorker> worker = testing::StartWorkerOrDie(
      {"--optimizer_plugin=" + lion, "--optimizer_plugin", lion});
  ASSERT_NE(worker, nullptr);
  Client client;
  absl::StatusOr<std::vector<v1::OptimizerKindInfo>> kinds =
      client.ListOptimizerKinds(worker->address());
  ASSERT_TRUE(kinds.ok()) << kinds.status();
  EXPECT_THAT(Names(*kinds), Contains("lion"));
  EXPECT_EQ(kinds->size(), 9u);
  for (const auto& kind : *kinds) {
    if (kind.name() == "lion") {
      EXPECT_EQ(kind.hyperparameters(0).default_value().number(), 1e-4);
      EXPECT_THAT(kind.state_buffers(), ElementsAre("exp_avg"));
    }
  }
}

TEST(OptimizerServiceTest, ABadPluginStopsTheDaemonAtStartUp) {
  LocalWorkerOptions options;
  options.flags = {"--optimizer_plugin=" + PluginPath("libno_entry_point.so")};
  absl::StatusOr<std::unique_ptr<LocalWorker>> worker =
      LocalWorker::Start(options);
  EXPECT_THAT(worker.status().message(), HasSubstr("exited with code 2"));
}

}  // namespace
}  // namespace distopt
