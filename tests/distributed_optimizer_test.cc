// DistributedOptimizer and autograd contexts across two real daemons.
#include "client/distributed_optimizer.h"

#include <signal.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "client/dist_autograd_context.h"
#include "client/layers.h"
#include "common/wire_limits.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/registry.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::Ramp;
using ::distopt::testing::SameBytes;
using ::distopt::testing::StartWorkerOrDie;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A deterministic gradient for parameter `p` at step `s`.
Tensor Gradient(const Shape& shape, int p, int s) {
  Tensor g = *Tensor::AllocateHost(DType::kFloat32, shape);
  float* values = static_cast<float*>(g.data());
  for (int64_t i = 0; i < g.num_elements(); ++i) {
    values[i] = static_cast<float>(std::sin(0.7 * i + 1.3 * p + 2.1 * s));
  }
  return g;
}

std::vector<v1::ContextInfo> Contexts(Client& client,
                                      const std::string& worker) {
  const v1::ListContextsResponse response =
      testing::ListContexts(client, worker);
  return {response.contexts().begin(), response.contexts().end()};
}

class DistributedOptimizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = StartWorkerOrDie();
    b_ = StartWorkerOrDie();
    ASSERT_TRUE(a_ != nullptr && b_ != nullptr);
  }
  void TearDown() override { client_.reset(); }

  std::unique_ptr<LocalWorker> a_;
  std::unique_ptr<LocalWorker> b_;
  std::unique_ptr<Client> client_ = std::make_unique<Client>();
};

TEST_F(DistributedOptimizerTest, MatchesALocalOptimizerFedTheSameGradients) {
  const std::vector<Shape> shapes = {{4, 3}, {5}, {}};
  std::vector<Tensor> initial = {Ramp({4, 3}, 0.5f, 0.1f), Ramp({5}, -1, 0.3f),
                                 Ramp({}, 2)};
  std::vector<RemoteParameter> remote = {
      *client_->CreateParameterFrom(a_->address(), "w1", initial[0]),
      *client_->CreateParameterFrom(b_->address(), "w2", initial[1]),
      *client_->CreateParameterFrom(b_->address(), "bias", initial[2])};
  const HyperparameterMap hyper = {{"lr", hyper::Number(0.05)},
                                   {"amsgrad", hyper::Flag(true)}};
  absl::StatusOr<std::unique_ptr<DistributedOptimizer>> optimizer =
      DistributedOptimizer::Create(client_.get(), "adam", remote, hyper);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  ASSERT_EQ((*optimizer)->owners().size(), 2u);
  EXPECT_EQ((*optimizer)->owners()[0].worker, a_->address());
  EXPECT_THAT((*optimizer)->owners()[1].parameter_ids,
              ElementsAre(remote[1].id, remote[2].id));

  // The reference: one local optimizer over the same parameters.
  auto registry = OptimizerRegistry::WithBuiltins();
  auto local = *FunctionalOptimizer::Create(*registry->Find("adam"),
                                            {{"lr", 0.05}, {"amsgrad", true}},
                                            {{DType::kFloat32, shapes[0]},
                                             {DType::kFloat32, shapes[1]},
                                             {DType::kFloat32, shapes[2]}});

  for (int s = 0; s < 5; ++s) {
    DistAutogradContext context(client_.get());
    std::vector<std::pair<RemoteParameter, Tensor>> pushes;
    std::vector<Tensor> grads;
    for (int p = 0; p < 3; ++p) {
      grads.push_back(Gradient(shapes[p], p, s));
      // Parameter 2 gets no gradient on odd steps: skipped there.
      if (p == 2 && s % 2 == 1) continue;
      pushes.emplace_back(remote[p], grads.back());
    }
    ASSERT_TRUE(context.AccumulateGradients(pushes).ok());
    ASSERT_TRUE((*optimizer)->Step(context.id()).ok());
    std::vector<Tensor*> params = {&initial[0], &initial[1], &initial[2]};
    ASSERT_TRUE(local
                    ->Step(params, {&grads[0], &grads[1],
                                    s % 2 == 1 ? nullptr : &grads[2]})
                    .ok());
  }
  for (int p = 0; p < 3; ++p) {
    EXPECT_TRUE(SameBytes(*client_->ReadParameter(remote[p]), initial[p]))
        << "parameter " << p;
  }
}

TEST_F(DistributedOptimizerTest, ContextsAccumulateAndAreReleasedEverywhere) {
  RemoteParameter w =
      *client_->CreateParameterFrom(a_->address(), "w", Ramp({3}));
  RemoteParameter v =
      *client_->CreateParameterFrom(b_->address(), "v", Ramp({2}));
  {
    DistAutogradContext context(client_.get());
    ASSERT_TRUE(
        context.AccumulateGradients({{w, Ramp({3}, 1)}, {v, Ramp({2})}}).ok());
    ASSERT_TRUE(context.AccumulateGradients({{w, Ramp({3}, 1)}}).ok());
    absl::StatusOr<std::map<uint64_t, Tensor>> gradients =
        client_->GetGradients(a_->address(), context.id());
    ASSERT_TRUE(gradients.ok());
    EXPECT_THAT(gradients->at(w.id).host_span<float>(),
                ElementsAre(2.0f, 4.0f, 6.0f));  // Two pushes add up.
    EXPECT_EQ(Contexts(*client_, a_->address()).size(), 1u);
    EXPECT_EQ(Contexts(*client_, b_->address()).size(), 1u);
    EXPECT_EQ(Contexts(*client_, a_->address())[0].bytes(), 12);
  }
  EXPECT_TRUE(Contexts(*client_, a_->address()).empty());
  EXPECT_TRUE(Contexts(*client_, b_->address()).empty());
  // Releasing an unknown context is a no-op.
  absl::StatusOr<bool> released = client_->ReleaseContext(a_->address(), 99);
  ASSERT_TRUE(released.ok());
  EXPECT_FALSE(*released);
}

TEST_F(DistributedOptimizerTest, BadGradientsChangeNothing) {
  RemoteParameter w =
      *client_->CreateParameterFrom(a_->address(), "w", Ramp({3}));
  const uint64_t context = client_->NewContextId();
  absl::Status status = client_->AccumulateGradients(
      a_->address(), context, {{w.id, Ramp({3})}, {w.id + 100, Ramp({3})}});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("gradients[1].parameter_id"));
  status =
      client_->AccumulateGradients(a_->address(), context, {{w.id, Ramp({4})}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("expected float32[3]"));
  EXPECT_EQ(client_->AccumulateGradients(a_->address(), 0, {{w.id, Ramp({3})}})
                .code(),
            absl::StatusCode::kInvalidArgument);
  // None of it created the context or added anything.
  EXPECT_EQ(client_->GetGradients(a_->address(), context).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(DistributedOptimizerTest, ARetriedStepIsAppliedOnce) {
  RemoteParameter w =
      *client_->CreateParameterFrom(a_->address(), "w", Ramp({3}, 0, 0));
  absl::StatusOr<v1::OptimizerInfo> optimizer = client_->CreateOptimizer(
      a_->address(), "sgd", {{"lr", hyper::Number(1.0)}}, {w.id});
  ASSERT_TRUE(optimizer.ok());
  DistAutogradContext context(client_.get());
  ASSERT_TRUE(context.AccumulateGradients({{w, Ramp({3}, 1, 0)}}).ok());
  absl::StatusOr<v1::StepResponse> first =
      client_->Step(a_->address(), optimizer->id(), context.id());
  absl::StatusOr<v1::StepResponse> retry =
      client_->Step(a_->address(), optimizer->id(), context.id());
  ASSERT_TRUE(first.ok() && retry.ok());
  EXPECT_TRUE(first->applied());
  EXPECT_FALSE(retry->applied());
  EXPECT_THAT(client_->ReadParameter(w)->host_span<float>(),
              ::testing::Each(-1.0f));
}

TEST_F(DistributedOptimizerTest, StepRefusesAContextTheClientDoesNotHold) {
  RemoteParameter w =
      *client_->CreateParameterFrom(a_->address(), "w", Ramp({3}));
  auto optimizer = *DistributedOptimizer::Create(client_.get(), "sgd", {w});
  absl::Status status = optimizer->Step(12345);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("not a live autograd context"));
}

TEST_F(DistributedOptimizerTest, AFailedWorkerIsNamedWithTheOnesThatApplied) {
  RemoteParameter w =
      *client_->CreateParameterFrom(a_->address(), "w", Ramp({3}));
  RemoteParameter v =
      *client_->CreateParameterFrom(b_->address(), "v", Ramp({3}));
  auto optimizer = *DistributedOptimizer::Create(client_.get(), "sgd", {w, v},
                                                 {{"lr", hyper::Number(1.0)}});
  DistAutogradContext context(client_.get());
  ASSERT_TRUE(
      context.AccumulateGradients({{w, Ramp({3}, 1, 0)}, {v, Ramp({3}, 1, 0)}})
          .ok());
  const std::string lost = b_->address();
  // Killed, not stopped: no chance to finish anything.
  b_->Signal(SIGKILL);
  ASSERT_TRUE(b_->Wait(absl::Seconds(10)).ok());
  absl::Status status = optimizer->Step(context.id());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(lost));
  EXPECT_THAT(status.message(), HasSubstr("Applied on: " + a_->address()));
  // The surviving worker did apply it.
  EXPECT_THAT(client_->ReadParameter(w)->host_span<float>(),
              ElementsAre(-1.0f, 0.0f, 1.0f));
}

TEST_F(DistributedOptimizerTest, AFailedCreationLeavesNoOptimizerBehind) {
  RemoteParameter w =
      *client_->CreateParameterFrom(a_->address(), "w", Ramp({3}));
  const RemoteParameter missing{b_->address(), 4242};
  absl::StatusOr<std::unique_ptr<DistributedOptimizer>> optimizer =
      DistributedOptimizer::Create(client_.get(), "adam", {w, missing});
  EXPECT_EQ(optimizer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(optimizer.status().message(), HasSubstr(b_->address()));
  auto stub = v1::OptimizerService::NewStub(client_->Channel(a_->address()));
  grpc::ClientContext context;
  v1::ListOptimizersResponse listed;
  ASSERT_TRUE(
      stub->ListOptimizers(&context, v1::ListOptimizersRequest(), &listed)
          .ok());
  EXPECT_EQ(listed.optimizers_size(), 0);
}

TEST_F(DistributedOptimizerTest, EightTrainersStepOneOptimizerConcurrently) {
  RemoteParameter w = *client_->CreateParameterFrom(
      a_->address(), "w", *Tensor::AllocateHost(DType::kFloat32, {100}));
  ASSERT_TRUE(client_->WriteParameter(w, Ramp({100}, 0, 0)).ok());
  auto optimizer = *DistributedOptimizer::Create(client_.get(), "sgd", {w},
                                                 {{"lr", hyper::Number(1.0)}});
  std::vector<std::thread> trainers;
  for (int t = 1; t <= 8; ++t) {
    trainers.emplace_back([&, t] {
      DistAutogradContext context(client_.get());
      ASSERT_TRUE(context.AccumulateGradients({{w, Ramp({100}, t, 0)}}).ok());
      ASSERT_TRUE(optimizer->Step(context.id()).ok());
    });
  }
  for (std::thread& trainer : trainers) trainer.join();
  // Every update landed once: 0 - (1 + ... + 8).
  EXPECT_THAT(client_->ReadParameter(w)->host_span<float>(),
              ::testing::Each(-36.0f));
}

TEST_F(DistributedOptimizerTest, RemoteLayersBackpropagateAndBackwardsAdd) {
  auto linear = *RemoteLinear::Create(client_.get(), a_->address(), "fc", 3, 2,
                                      /*seed=*/5);
  auto embedding = *RemoteEmbedding::Create(client_.get(), b_->address(), "emb",
                                            6, 3, /*seed=*/6);
  Tensor indices = *Tensor::AllocateHost(DType::kInt64, {2});
  indices.host_span<int64_t>()[0] = 4;
  indices.host_span<int64_t>()[1] = 1;
  auto gradients_after = [&](int passes) {
    DistAutogradContext context(client_.get());
    for (int pass = 0; pass < passes; ++pass) {
      Variable rows = *embedding.Forward(context, indices);
      Variable out = *linear.Forward(context, rows);
      Tensor ones = *Tensor::AllocateHost(DType::kFloat32, {2, 2});
      for (float& x : ones.host_span<float>()) x = 1.0f;
      EXPECT_TRUE(context.Backward(out, ones).ok());
    }
    // Parameter ids are per worker: key by reference.
    std::map<std::string, Tensor> all;
    for (const std::string& worker : {a_->address(), b_->address()}) {
      absl::StatusOr<std::map<uint64_t, Tensor>> gradients =
          client_->GetGradients(worker, context.id());
      EXPECT_TRUE(gradients.ok()) << gradients.status();
      if (!gradients.ok()) continue;
      for (auto& [id, gradient] : *gradients) {
        all[RemoteParameter{worker, id}.ToString()] = gradient;
      }
    }
    return all;
  };
  auto once = gradients_after(1);
  auto twice = gradients_after(2);
  ASSERT_EQ(once.size(), 3u);  // fc.weight, fc.bias, emb.weight.
  for (const auto& [name, gradient] : once) {
    const Tensor& doubled = twice.at(name);
    for (int64_t i = 0; i < gradient.num_elements(); ++i) {
      EXPECT_FLOAT_EQ(doubled.host_span<float>()[i],
                      2 * gradient.host_span<float>()[i]);
    }
  }
  // Only rows 4 and 1 of the embedding received a gradient.
  const Tensor& table = once.at(embedding.parameters()[0].ToString());
  for (int row = 0; row < 6; ++row) {
    bool any = false;
    for (int d = 0; d < 3; ++d)
      any |= table.host_span<float>()[row * 3 + d] != 0;
    EXPECT_EQ(any, row == 4 || row == 1) << "row " << row;
  }
  // The bias gradient of a sum over 2 rows is 2 per output.
  EXPECT_THAT(once.at(linear.parameters()[1].ToString()).host_span<float>(),
              ::testing::Each(2.0f));
}

TEST_F(DistributedOptimizerTest, BackwardAfterAStepIsRefused) {
  auto linear = *RemoteLinear::Create(client_.get(), a_->address(), "fc", 2, 2,
                                      /*seed=*/1);
  auto optimizer =
      *DistributedOptimizer::Create(client_.get(), "sgd", linear.parameters());
  DistAutogradContext context(client_.get());
  Variable out = *linear.Forward(context, {Ramp({1, 2}), -1});
  Tensor g = Ramp({1, 2}, 1, 0);
  ASSERT_TRUE(context.Backward(out, g).ok());
  ASSERT_TRUE(optimizer->Step(context.id()).ok());
  absl::Status late = context.Backward(out, g);
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.message(), HasSubstr("changed since forward"));
}

TEST_F(DistributedOptimizerTest,
       LargeGradientsGoChunkedAndOversizedOnesAreNamed) {
  // 20 MiB: over gRPC's default 4 MiB, within one unary call.
  RemoteParameter w =
      *client_->CreateParameter(a_->address(), "w", DType::kFloat32, {5 << 20});
  DistAutogradContext context(client_.get());
  Tensor big = Ramp({5 << 20}, 0, 0.5f);
  ASSERT_TRUE(context.AccumulateGradients({{w, big}}).ok());
  absl::StatusOr<std::map<uint64_t, Tensor>> back =
      client_->GetGradients(a_->address(), context.id());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(SameBytes(back->at(w.id), big));
  // 64 MiB: beyond one message, pushed in chunks; reading it back, the
  // unary GetGradients is refused as too large and the chunked one answers.
  RemoteParameter v = *client_->CreateParameter(a_->address(), "v",
                                                DType::kFloat32, {16 << 20});
  Tensor huge = Ramp({16 << 20}, -3, 0.25f);
  ASSERT_TRUE(context.AccumulateGradients({{v, huge}}).ok());
  ASSERT_TRUE(context.AccumulateGradients({{v, huge}}).ok());
  back = client_->GetGradients(a_->address(), context.id());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(SameBytes(back->at(w.id), big));
  const Tensor& twice = back->at(v.id);
  ASSERT_EQ(twice.shape(), huge.shape());
  for (int64_t i = 0; i < huge.num_elements(); i += 4099) {
    ASSERT_EQ(static_cast<const float*>(twice.data())[i],
              2 * static_cast<const float*>(huge.data())[i])
        << "element " << i;
  }
  // Beyond what even a chunked call carries: refused before it is sent
  // (the tensor's pages are never touched).
  RemoteParameter x =
      *client_->CreateParameter(a_->address(), "x", DType::kFloat32, {1});
  absl::Status status = context.AccumulateGradients(
      {{x, *Tensor::AllocateHost(DType::kFloat32,
                                 {(kMaxChunkedPayloadBytes / 4) + 1})}});
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("split the batch"));
}

TEST_F(DistributedOptimizerTest, AForwardNeverSeesAHalfDoneStep) {
  // Two identical rows of 256K: a forward that read row 0 after a step and
  // row 1 before it would give two different outputs.
  constexpr int64_t kColumns = 1 << 18;
  RemoteParameter w = *client_->CreateParameter(
      a_->address(), "w", DType::kFloat32, {2, kColumns}, init::Constant(0.5));
  auto optimizer = *DistributedOptimizer::Create(client_.get(), "sgd", {w},
                                                 {{"lr", hyper::Number(1e-3)}});
  Tensor ones = Ramp({2, kColumns}, 1, 0);
  std::thread stepper([&] {
    for (int s = 0; s < 30; ++s) {
      DistAutogradContext context(client_.get());
      ASSERT_TRUE(context.AccumulateGradients({{w, ones}}).ok());
      ASSERT_TRUE(optimizer->Step(context.id()).ok());
    }
  });
  Tensor x = Ramp({1, kColumns}, 1, 0);
  for (int f = 0; f < 30; ++f) {
    DistAutogradContext context(client_.get());
    absl::StatusOr<Client::ForwardResult> y =
        client_->Forward(a_->address(), context.id(), "linear", {w.id}, {x});
    ASSERT_TRUE(y.ok()) << y.status();
    const auto values = y->outputs[0].host_span<float>();
    ASSERT_EQ(values[0], values[1]) << "forward " << f;
  }
  stepper.join();
}

TEST(ContextTtlTest, AnAbandonedContextIsCollected) {
  std::unique_ptr<LocalWorker> worker = StartWorkerOrDie({"--context_ttl=1s"});
  ASSERT_NE(worker, nullptr);
  Client client;
  RemoteParameter w =
      *client.CreateParameterFrom(worker->address(), "w", Ramp({3}));
  // A trainer that pushes gradients and then "crashes" without releasing.
  ASSERT_TRUE(client
                  .AccumulateGradients(worker->address(), client.NewContextId(),
                                       {{w.id, Ramp({3})}})
                  .ok());
  EXPECT_EQ(Contexts(client, worker->address()).size(), 1u);
  testing::PollUntil(
      [&] { return Contexts(client, worker->address()).empty(); },
      absl::Seconds(20));
  EXPECT_TRUE(Contexts(client, worker->address()).empty());
}

}  // namespace
}  // namespace distopt
