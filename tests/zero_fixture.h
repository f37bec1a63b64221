// The fixture of the ZeroService and LocalSgdService tests: W daemons
// joined through rank 0's store, each holding the same small model, with
// helpers to run a call on every rank at once (and check it succeeded on
// each), push each rank's gradients, create ZeRO and train it step by step on
// every rank, and compute the reference a local optimizer reaches with the
// averaged gradients.
#ifndef DISTOPT_TESTS_ZERO_FIXTURE_H_
#define DISTOPT_TESTS_ZERO_FIXTURE_H_

#include <algorithm>
#include <csignal>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "client/data_parallel.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/zero.grpc.pb.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/registry.h"
#include "tests/worker_fixture.h"

namespace distopt {

inline constexpr double kLr = 0.1;
inline constexpr double kMomentum = 0.9;
inline const std::vector<std::pair<std::string, Shape>> kModel = {
    {"fc1.weight", {16, 8}},
    {"fc1.bias", {16}},
    {"fc2.weight", {4, 16}},
    {"fc2.bias", {4}}};

inline absl::flat_hash_map<std::string, HyperValue> Hyperparameters(
    const std::string& kind, double lr) {
  if (kind == "sgd") return {{"lr", lr}, {"momentum", kMomentum}};
  return {{"lr", lr / 10}, {"weight_decay", 0.01}};
}

inline v1::CreateZeroRequest Spec(const std::string& kind, double lr) {
  v1::CreateZeroRequest request;
  request.set_kind(kind);
  request.set_timeout_ms(30000);
  v1::ZeroParamGroup* group = request.add_groups();
  for (const auto& [name, value] : Hyperparameters(kind, lr)) {
    (*group->mutable_hyperparameters())[name].set_number(
        std::get<double>(value));
  }
  for (const auto& [name, shape] : kModel) group->add_parameter_names(name);
  return request;
}

inline v1::CreateZeroRequest SgdSpec(double lr) { return Spec("sgd", lr); }

inline Tensor Initial(size_t p) {
  return testing::Ramp(kModel[p].second, -1.0f, 0.03f);
}

// Rank `rank`'s gradient of parameter `p` at step `step`: multiples of 1/64
// small enough that every sum over ranks is exact in float32, in any order.
inline Tensor RankGradient(int rank, size_t p, int step) {
  Tensor t = *Tensor::AllocateHost(DType::kFloat32, kModel[p].second);
  absl::Span<float> v = t.host_span<float>();
  for (int64_t e = 0; e < t.num_elements(); ++e) {
    v[e] =
        static_cast<float>(((e * 7 + p * 3 + step * 11 + rank * 13) % 17) - 8) /
        64.0f;
  }
  return t;
}

// The reference: one local optimizer over the whole model, fed the average
// of the ranks' gradients (computed as the all-reduce does: fp32 sums of
// exact values, times 1/W).
class ReferenceTraining {
 public:
  explicit ReferenceTraining(const std::string& kind) {
    registry_ = OptimizerRegistry::WithBuiltins();
    std::vector<ParameterLayout> layouts;
    for (size_t p = 0; p < kModel.size(); ++p) {
      layouts.push_back({DType::kFloat32, kModel[p].second});
      values_.push_back(Initial(p));
    }
    optimizer_ = *FunctionalOptimizer::Create(
        *registry_->Find(kind), Hyperparameters(kind, kLr), layouts);
  }

  // One step with the gradients of the ranks whose data has not run out.
  void Step(int world, int step, const std::vector<int>& data_steps = {}) {
    std::vector<Tensor> averaged;
    std::vector<Tensor*> params;
    std::vector<const Tensor*> grads;
    for (size_t p = 0; p < kModel.size(); ++p) {
      Tensor sum = *Tensor::AllocateHost(DType::kFloat32, kModel[p].second);
      for (float& x : sum.host_span<float>()) x = 0.0f;
      for (int r = 0; r < world; ++r) {
        if (!data_steps.empty() && step >= data_steps[r]) continue;
        Tensor mine = RankGradient(r, p, step);
        for (int64_t e = 0; e < sum.num_elements(); ++e) {
          sum.host_span<float>()[e] += mine.host_span<float>()[e];
        }
      }
      for (float& x : sum.host_span<float>()) x *= 1.0f / world;
      averaged.push_back(std::move(sum));
    }
    for (size_t p = 0; p < kModel.size(); ++p) {
      params.push_back(&values_[p]);
      grads.push_back(&averaged[p]);
    }
    absl::Status status = optimizer_->Step(params, grads);
    ASSERT_TRUE(status.ok()) << status;
  }

  void SetHyperparameters(
      const absl::flat_hash_map<std::string, HyperValue>& changes) {
    ASSERT_TRUE(optimizer_->SetHyperparameters(changes).ok());
  }

  const std::vector<Tensor>& values() const { return values_; }
  const FunctionalOptimizer& optimizer() const { return *optimizer_; }

 private:
  std::unique_ptr<OptimizerRegistry> registry_;
  std::vector<Tensor> values_;
  std::unique_ptr<FunctionalOptimizer> optimizer_;
};

class ZeroServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { StartRanks(2); }
  void TearDown() override { StopRanks(); }

 public:
  // Starts `world` daemons joined through rank 0's store, each holding the
  // model at `values` (default: its initial values).
  void StartRanks(int world, const std::vector<Tensor>& values = {}) {
    StartRanksHolding(world, std::vector<std::vector<Tensor>>(world, values));
  }

  // The same, rank r holding values[r] (its initial values when empty).
  void StartRanksHolding(int world,
                         const std::vector<std::vector<Tensor>>& values) {
    world_ = world;
    for (int r = 0; r < world; ++r) {
      ranks_.push_back(
          testing::StartRankOrDie(RankFlags(r, world), RankLauncher(r)));
      ASSERT_NE(ranks_[r], nullptr);
    }
    for (int r = 0; r < world; ++r) {
      addresses_.push_back(ranks_[r]->address());
      std::vector<RemoteParameter> params;
      for (size_t p = 0; p < kModel.size(); ++p) {
        absl::StatusOr<RemoteParameter> param = client_->CreateParameterFrom(
            addresses_[r], kModel[p].first,
            values[r].empty() ? Initial(p) : values[r][p]);
        ASSERT_TRUE(param.ok()) << param.status();
        params.push_back(*param);
      }
      params_.push_back(params);
    }
  }

  int world() const { return world_; }

  // Rank r's flags: joined through rank 0's store, and extra_flags_.
  virtual std::vector<std::string> RankFlags(int r, int world) const {
    std::vector<std::string> flags = {
        absl::StrCat("--rank=", r), absl::StrCat("--world_size=", world),
        "--rendezvous=" +
            (r == 0 ? std::string("127.0.0.1:1") : ranks_[0]->address()),
        "--group_timeout=60s"};
    for (const std::string& flag : extra_flags_) {
      flags.push_back(absl::StrReplaceAll(flag, {{"{rank}", absl::StrCat(r)}}));
    }
    return flags;
  }
  // What rank r's daemon is started through (LocalWorkerOptions::launcher).
  virtual std::vector<std::string> RankLauncher(int) const { return {}; }

  // CheckpointService.Save on every rank (of daemons started with
  // --checkpoint_dir in extra_flags_).
  ::testing::AssertionResult SaveOnEveryRank() {
    return OkOnEveryRank([&](int r) {
      return ToGrpcStatus(client_->SaveCheckpoint(addresses_[r]).status());
    });
  }

  // SIGKILLs every rank, then starts `world` ranks (default: as many) with
  // the same flags (on their checkpoint folders); the parameters are found
  // by name, or, on a rank that restored none, created at `values`.
  void KillAndRestart(int world = 0, const std::vector<Tensor>& values = {}) {
    for (auto& rank : ranks_) rank->Signal(SIGKILL);
    for (auto& rank : ranks_) ASSERT_TRUE(rank->Wait(absl::Seconds(30)).ok());
    if (world == 0) world = world_;
    world_ = world;
    ranks_.clear();
    addresses_.clear();
    params_.clear();
    client_ = std::make_unique<Client>();
    for (int r = 0; r < world; ++r) {
      ranks_.push_back(testing::StartRankOrDie(RankFlags(r, world)));
      ASSERT_NE(ranks_[r], nullptr);
      addresses_.push_back(ranks_[r]->address());
    }
    for (int r = 0; r < world; ++r) {
      std::vector<RemoteParameter> params;
      for (const auto& [name, shape] : kModel) {
        absl::StatusOr<RemoteParameter> found =
            client_->FindParameter(addresses_[r], name);
        if (absl::IsNotFound(found.status()) && !values.empty()) {
          found = client_->CreateParameterFrom(addresses_[r], name,
                                               values[params.size()]);
        }
        ASSERT_TRUE(found.ok()) << found.status();
        params.push_back(*found);
      }
      params_.push_back(params);
    }
  }

  // Stops every daemon (as for a restart at another world size).
  void StopRanks() {
    client_ = std::make_unique<Client>();
    // Last rank first: every rank keeps a channel to rank 0's store, and a
    // daemon waits at shutdown for its connected clients to let go.
    while (!ranks_.empty()) {
      if (ranks_.back() != nullptr)
        testing::StopAndCheckSanitizers(*ranks_.back());
      ranks_.pop_back();
    }
    addresses_.clear();
    params_.clear();
    world_ = 0;
  }

  // Rank r's gradients of step `step` in a new context, on every rank
  // whose data has not run out (`data_steps`, default: none has), for every
  // parameter but those in `without`.
  uint64_t PushGradients(int step, const std::vector<int>& data_steps = {},
                         const std::vector<size_t>& without = {}) {
    const uint64_t context_id = client_->NewContextId();
    for (int r = 0; r < world_; ++r) {
      if (!data_steps.empty() && step >= data_steps[r]) continue;
      std::vector<std::pair<uint64_t, Tensor>> gradients;
      for (size_t p = 0; p < kModel.size(); ++p) {
        if (std::find(without.begin(), without.end(), p) != without.end()) {
          continue;
        }
        gradients.emplace_back(params_[r][p].id, RankGradient(r, p, step));
      }
      absl::Status pushed =
          client_->AccumulateGradients(addresses_[r], context_id, gradients);
      EXPECT_TRUE(pushed.ok()) << pushed;
    }
    return context_id;
  }

  // Runs `call(rank)` on every rank at once, as a collective needs.
  std::vector<grpc::Status> OnEveryRank(
      const std::function<grpc::Status(int)>& call) {
    std::vector<grpc::Status> results(world_);
    std::vector<std::thread> threads;
    for (int r = 0; r < world_; ++r) {
      threads.emplace_back([&, r] { results[r] = call(r); });
    }
    for (std::thread& thread : threads) thread.join();
    return results;
  }

  // OnEveryRank, for calls that must succeed: a failure names each rank
  // whose call failed. ASSERT_TRUE(OkOnEveryRank(...)).
  ::testing::AssertionResult OkOnEveryRank(
      const std::function<grpc::Status(int)>& call) {
    const std::vector<grpc::Status> results = OnEveryRank(call);
    std::string failed;
    for (int r = 0; r < world_; ++r) {
      if (!results[r].ok()) {
        absl::StrAppend(&failed, "rank ", r, ": ", results[r].error_message(),
                        "\n");
      }
    }
    if (failed.empty()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << failed;
  }

  // CreateZero(spec) on every rank; `infos`, when given, gets each rank's.
  ::testing::AssertionResult CreateZeroOnEveryRank(
      const v1::CreateZeroRequest& spec,
      std::vector<v1::ZeroInfo>* infos = nullptr) {
    std::vector<v1::ZeroInfo> created(world_);
    ::testing::AssertionResult result =
        OkOnEveryRank([&](int r) { return CreateZero(r, spec, &created[r]); });
    if (infos != nullptr) *infos = std::move(created);
    return result;
  }

  // Steps first, ..., first + count - 1 on every rank (each rank's
  // gradients), and `reference` with them.
  ::testing::AssertionResult TrainSteps(ReferenceTraining& reference, int first,
                                        int count) {
    for (int step = first; step < first + count; ++step) {
      const uint64_t context_id = PushGradients(step);
      ::testing::AssertionResult stepped =
          OkOnEveryRank([&](int r) { return Step(r, context_id); });
      if (!stepped) return stepped << "at step " << step;
      reference.Step(world_, step);
    }
    return ::testing::AssertionSuccess();
  }

  grpc::Status CreateZero(int rank, const v1::CreateZeroRequest& request,
                          v1::ZeroInfo* info) {
    auto stub = v1::ZeroService::NewStub(client_->Channel(addresses_[rank]));
    grpc::ClientContext context;
    return stub->CreateZero(&context, request, info);
  }

  grpc::Status Step(int rank, uint64_t context_id) {
    auto stub = v1::ZeroService::NewStub(client_->Channel(addresses_[rank]));
    grpc::ClientContext context;
    v1::ZeroStepRequest request;
    request.set_context_id(context_id);
    v1::ZeroStepResponse response;
    return stub->Step(&context, request, &response);
  }

  template <typename Request, typename Response>
  grpc::Status Call(int rank,
                    grpc::Status (v1::ZeroService::Stub::*method)(
                        grpc::ClientContext*, const Request&, Response*),
                    const Request& request, Response* response) {
    auto stub = v1::ZeroService::NewStub(client_->Channel(addresses_[rank]));
    grpc::ClientContext context;
    return (stub.get()->*method)(&context, request, response);
  }

  // The group steps rank `rank`'s ZeRO optimizer counts (GetZero).
  int64_t Steps(int rank) {
    v1::ZeroInfo info;
    grpc::Status got = Call(rank, &v1::ZeroService::Stub::GetZero,
                            v1::GetZeroRequest(), &info);
    EXPECT_TRUE(got.ok()) << got.error_message();
    return info.steps();
  }

  // Rank `rank`'s parameters, as they are now.
  std::vector<Tensor> ReadModel(int rank) {
    std::vector<Tensor> model;
    for (size_t p = 0; p < kModel.size(); ++p) {
      absl::StatusOr<Tensor> values = client_->ReadParameter(params_[rank][p]);
      EXPECT_TRUE(values.ok()) << values.status();
      model.push_back(values.ok() ? *std::move(values) : Tensor());
    }
    return model;
  }

  // ConsolidateStateDict(to) on every rank, then rank `to`'s state dict.
  v1::ZeroStateDict Consolidated(int to) {
    v1::ConsolidateZeroStateDictRequest request;
    request.set_to(to);
    std::vector<v1::ConsolidateZeroStateDictResponse> responses(world_);
    std::vector<grpc::Status> results = OnEveryRank([&](int r) {
      return Call(r, &v1::ZeroService::Stub::ConsolidateStateDict, request,
                  &responses[r]);
    });
    for (int r = 0; r < world_; ++r) {
      EXPECT_TRUE(results[r].ok()) << r << ": " << results[r].error_message();
      EXPECT_EQ(responses[r].holds_state_dict(), r == to) << r;
    }
    v1::ZeroStateDict dict;
    grpc::Status got = GetZeroStateDict(to, &dict);
    EXPECT_TRUE(got.ok()) << got.error_message();
    return dict;
  }

  // Through the client library's RemoteZero (state dicts in chunks).
  grpc::Status GetZeroStateDict(int rank, v1::ZeroStateDict* dict) {
    absl::StatusOr<v1::ZeroStateDict> got =
        RemoteZero(client_.get(), addresses_[rank]).GetStateDict();
    if (got.ok()) *dict = *std::move(got);
    return ToGrpcStatus(got.status());
  }

  grpc::Status LoadZeroStateDict(int rank, const v1::ZeroStateDict& dict) {
    return ToGrpcStatus(
        RemoteZero(client_.get(), addresses_[rank]).LoadStateDict(dict));
  }

  // Every rank's parameters equal `reference`, bit for bit.
  void ExpectEveryRankHolds(const std::vector<Tensor>& reference) {
    for (size_t p = 0; p < kModel.size(); ++p) {
      for (int r = 0; r < world_; ++r) {
        absl::StatusOr<Tensor> values = client_->ReadParameter(params_[r][p]);
        ASSERT_TRUE(values.ok()) << values.status();
        EXPECT_TRUE(testing::SameBytes(*values, reference[p]))
            << "rank " << r << " " << kModel[p].first;
      }
    }
  }

 protected:
  // More flags for every rank; "{rank}" stands for the rank's number.
  std::vector<std::string> extra_flags_;
  int world_ = 0;
  std::vector<std::unique_ptr<LocalWorker>> ranks_;
  std::vector<std::string> addresses_;
  std::vector<std::vector<RemoteParameter>> params_;
  // A pointer, so that StopRanks can close its channels first: a daemon
  // with idle connected clients waits for them at shutdown.
  std::unique_ptr<Client> client_ = std::make_unique<Client>();
};

}  // namespace distopt

#endif  // DISTOPT_TESTS_ZERO_FIXTURE_H_
