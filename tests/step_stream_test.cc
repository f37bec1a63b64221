// OptimizerService.StepStream, and the client's steps over it, against real
// daemons: errors stay with their step, shutdown ends idle streams at once,
// a stream broken by a restart is replaced, a step past its deadline gives
// up, and steps still apply once.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::PluginPath;
using ::distopt::testing::Ramp;
using ::distopt::testing::StartWorkerOrDie;
using ::testing::HasSubstr;

// A one-parameter SGD optimizer on `worker` and a context holding a
// gradient for it; returns {optimizer id, context id}.
struct Stepping {
  RemoteParameter parameter;
  uint64_t optimizer_id = 0;
};

Stepping MakeOptimizer(Client& client, const std::string& worker,
                       const std::string& kind = "sgd",
                       const HyperparameterMap& hyperparameters = {}) {
  Stepping s;
  absl::StatusOr<RemoteParameter> parameter =
      client.CreateParameter(worker, "w", DType::kFloat32, {4});
  EXPECT_TRUE(parameter.ok()) << parameter.status();
  if (!parameter.ok()) return s;
  s.parameter = *parameter;
  absl::StatusOr<v1::OptimizerInfo> optimizer =
      client.CreateOptimizer(worker, kind, hyperparameters, {parameter->id});
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  if (optimizer.ok()) s.optimizer_id = optimizer->id();
  return s;
}

uint64_t ContextWithGradient(Client& client, const Stepping& s) {
  const uint64_t context_id = client.NewContextId();
  EXPECT_TRUE(client
                  .AccumulateGradients(s.parameter.worker, context_id,
                                       {{s.parameter.id, Ramp({4}, 1)}})
                  .ok());
  return context_id;
}

TEST(StepStreamTest, AFailedStepFailsOnlyItsOwnOutcome) {
  std::unique_ptr<LocalWorker> worker = StartWorkerOrDie();
  ASSERT_NE(worker, nullptr);
  Client client;
  const Stepping s = MakeOptimizer(client, worker->address());
  const uint64_t context_id = ContextWithGradient(client, s);

  auto stub = v1::OptimizerService::NewStub(client.Channel(worker->address()));
  grpc::ClientContext call;
  auto stream = stub->StepStream(&call);
  auto step = [&](uint64_t optimizer_id) {
    v1::StepRequest request;
    request.set_optimizer_id(optimizer_id);
    request.set_context_id(context_id);
    v1::StepOutcome outcome;
    EXPECT_TRUE(stream->Write(request));
    EXPECT_TRUE(stream->Read(&outcome));
    return outcome;
  };
  const v1::StepOutcome unknown = step(s.optimizer_id + 100);
  EXPECT_EQ(unknown.code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_THAT(unknown.message(), HasSubstr("optimizer"));
  EXPECT_FALSE(unknown.has_response());
  // The same stream goes on: the step applies, and applies once.
  const v1::StepOutcome first = step(s.optimizer_id);
  EXPECT_EQ(first.code(), 0) << first.message();
  EXPECT_TRUE(first.response().applied());
  EXPECT_EQ(first.response().stepped_parameters(), 1);
  const v1::StepOutcome again = step(s.optimizer_id);
  EXPECT_EQ(again.code(), 0) << again.message();
  EXPECT_FALSE(again.response().applied());
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());

  absl::StatusOr<v1::OptimizerInfo> info =
      client.SetHyperparameters(worker->address(), s.optimizer_id, {});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->steps(), 1);
}

TEST(StepStreamTest, ShutdownDoesNotWaitForAnIdleStream) {
  // A grace period longer than Stop's patience: if the daemon waited for
  // the client's open stream, Stop would have to kill it.
  std::unique_ptr<LocalWorker> worker =
      StartWorkerOrDie({"--shutdown_grace=120s"});
  ASSERT_NE(worker, nullptr);
  Client client;  // Stays alive, with its step stream open and idle.
  const Stepping s = MakeOptimizer(client, worker->address());
  ASSERT_TRUE(client
                  .Step(worker->address(), s.optimizer_id,
                        ContextWithGradient(client, s))
                  .ok());
  absl::StatusOr<int> exit_code = worker->Stop(absl::Seconds(20));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0) << "the daemon did not stop by itself";
}

TEST(StepStreamTest, AStepInFlightAtShutdownIsAnsweredFirst) {
  // The daemon inherits the variable: its slow step creates the marker.
  const std::string marker =
      std::string(std::getenv("TEST_TMPDIR")) + "/slow_sgd_stepping";
  std::remove(marker.c_str());
  setenv("DISTOPT_SLOW_SGD_MARKER", marker.c_str(), 1);
  std::unique_ptr<LocalWorker> worker = StartWorkerOrDie(
      {"--optimizer_plugin=" + PluginPath("libslow_sgd_plugin.so")});
  unsetenv("DISTOPT_SLOW_SGD_MARKER");
  ASSERT_NE(worker, nullptr);
  Client client;
  const Stepping s = MakeOptimizer(client, worker->address(), "slow_sgd",
                                   {{"delay_seconds", hyper::Number(1.0)}});
  const uint64_t context_id = ContextWithGradient(client, s);
  absl::StatusOr<v1::StepResponse> stepped;
  std::thread stepper([&] {
    stepped = client.Step(worker->address(), s.optimizer_id, context_id);
  });
  // SIGTERM once the step is under way (its update sleeps for a second).
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!std::ifstream(marker).good() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(std::ifstream(marker).good()) << "the step never started";
  worker->Signal(SIGTERM);
  stepper.join();
  ASSERT_TRUE(stepped.ok()) << stepped.status();
  EXPECT_TRUE(stepped->applied());
  absl::StatusOr<int> exit_code = worker->Wait(absl::Seconds(20));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0);
}

TEST(StepStreamTest, AStreamBrokenByARestartIsReplaced) {
  std::unique_ptr<LocalWorker> first = StartWorkerOrDie();
  ASSERT_NE(first, nullptr);
  const std::string address = first->address();
  Client client;
  const Stepping before = MakeOptimizer(client, address);
  ASSERT_TRUE(client
                  .Step(address, before.optimizer_id,
                        ContextWithGradient(client, before))
                  .ok());
  ASSERT_TRUE(first->Stop().ok());
  // A new daemon on the same address: the client's open stream is dead.
  std::unique_ptr<LocalWorker> second =
      StartWorkerOrDie({"--listen=" + address});
  ASSERT_NE(second, nullptr);
  ASSERT_EQ(second->address(), address);
  const Stepping after = MakeOptimizer(client, address);
  absl::StatusOr<v1::StepResponse> stepped = client.Step(
      address, after.optimizer_id, ContextWithGradient(client, after));
  ASSERT_TRUE(stepped.ok()) << stepped.status();
  EXPECT_TRUE(stepped->applied());
}

TEST(StepStreamTest, AStepPastItsDeadlineGivesUpAndTheNextOneWorks) {
  std::unique_ptr<LocalWorker> worker = StartWorkerOrDie(
      {"--optimizer_plugin=" + PluginPath("libslow_sgd_plugin.so")});
  ASSERT_NE(worker, nullptr);
  ClientOptions options;
  options.rpc_timeout = absl::Milliseconds(500);
  Client client(options);
  const Stepping s = MakeOptimizer(client, worker->address(), "slow_sgd",
                                   {{"delay_seconds", hyper::Number(3.0)}});
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::StepResponse> late = client.Step(
      worker->address(), s.optimizer_id, ContextWithGradient(client, s));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2.5)) << "not given up early";
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(late.status().message(), HasSubstr(worker->address()));

  // Once the slow step is over (the daemon finishes it), a fast one goes
  // through on a new stream.
  ClientOptions patient;
  Client admin(patient);
  ASSERT_TRUE(admin
                  .SetHyperparameters(worker->address(), s.optimizer_id,
                                      {{"delay_seconds", hyper::Number(0)}})
                  .ok());
  absl::StatusOr<v1::StepResponse> next = client.Step(
      worker->address(), s.optimizer_id, ContextWithGradient(client, s));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(next->applied());
}

}  // namespace
}  // namespace distopt
