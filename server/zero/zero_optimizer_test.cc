// ZeRO across ranks over real gloo (loopback TCP, one thread per rank):
// after 10 steps every rank's parameters are identical and equal, bit for
// bit, to one local optimizer fed the averaged gradients; each rank holds
// about 1/W of the optimizer state.
#include "server/zero/zero_optimizer.h"

#include <cstring>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/comm/gloo_communicator.h"
#include "server/optim/registry.h"

namespace distopt {
namespace {

const std::vector<std::vector<Shape>> kShapes = {{{40, 25}, {25}, {7}, {300}},
                                                 {{13, 9}, {}, {64}}};

// Rank r's gradient of parameter (g, i) at step s: multiples of 1/64 small
// enough that every sum over ranks is exact in float32, whatever the order.
Tensor Gradient(int g, int i, int s, int r, const Shape& shape) {
  Tensor t = *Tensor::AllocateHost(DType::kFloat32, shape);
  float* v = static_cast<float*>(t.data());
  for (int64_t e = 0; e < t.num_elements(); ++e) {
    v[e] = static_cast<float>(((e * 7 + i * 3 + g * 5 + s * 11 + r * 13) % 17) -
                              8) /
           64.0f;
  }
  return t;
}

Tensor Initial(int g, int i, const Shape& shape) {
  Tensor t = *Tensor::AllocateHost(DType::kFloat32, shape);
  float* v = static_cast<float*>(t.data());
  for (int64_t e = 0; e < t.num_elements(); ++e) {
    v[e] = static_cast<float>((e % 13) - 6) / 8.0f + g + 0.5f * i;
  }
  return t;
}

std::vector<absl::flat_hash_map<std::string, HyperValue>> Hyper(
    const std::string& kind) {
  if (kind == "sgd") return {{{"lr", 0.1}, {"momentum", 0.9}}, {{"lr", 0.05}}};
  return {{{"lr", 0.01}}, {{"lr", 0.02}, {"weight_decay", 0.01}}};
}

void RunZero(const std::string& kind, int world_size) {
  auto registry = OptimizerRegistry::WithBuiltins();
  const OptimizerKind* optimizer_kind = *registry->Find(kind);
  constexpr int kSteps = 10;

  // The reference: one optimizer per group over all parameters, fed the
  // average of the ranks' gradients (computed as the all-reduce does).
  std::vector<std::vector<Tensor>> reference(kShapes.size());
  std::vector<std::unique_ptr<FunctionalOptimizer>> local;
  for (size_t g = 0; g < kShapes.size(); ++g) {
    std::vector<ParameterLayout> layouts;
    for (size_t i = 0; i < kShapes[g].size(); ++i) {
      reference[g].push_back(Initial(g, i, kShapes[g][i]));
      layouts.push_back({DType::kFloat32, kShapes[g][i]});
    }
    local.push_back(
        *FunctionalOptimizer::Create(optimizer_kind, Hyper(kind)[g], layouts));
  }
  for (int s = 0; s < kSteps; ++s) {
    for (size_t g = 0; g < kShapes.size(); ++g) {
      std::vector<Tensor> averaged;
      std::vector<Tensor*> params;
      std::vector<const Tensor*> grads;
      for (size_t i = 0; i < kShapes[g].size(); ++i) {
        Tensor sum = Gradient(g, i, s, 0, kShapes[g][i]);
        for (int r = 1; r < world_size; ++r) {
          Tensor other = Gradient(g, i, s, r, kShapes[g][i]);
          for (int64_t e = 0; e < sum.num_elements(); ++e) {
            sum.host_span<float>()[e] += other.host_span<float>()[e];
          }
        }
        for (float& x : sum.host_span<float>()) x *= 1.0f / world_size;
        averaged.push_back(sum);
      }
      for (size_t i = 0; i < kShapes[g].size(); ++i) {
        params.push_back(&reference[g][i]);
        grads.push_back(&averaged[i]);
      }
      ASSERT_TRUE(local[g]->Step(params, grads).ok());
    }
  }
  int64_t total_state = 0;
  for (const auto& optimizer : local) {
    for (size_t i = 0; i < optimizer->parameters().size(); ++i) {
      for (const auto& [name, buffer] : optimizer->state(i).buffers) {
        total_state += buffer.byte_size();
      }
    }
  }

  KeyValueStore store;
  LocalRendezvousStore rendezvous(&store);
  std::vector<std::vector<std::vector<Tensor>>> finals(world_size);
  std::vector<int64_t> state_bytes(world_size);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world_size; ++r) {
    ranks.emplace_back([&, r] {
      GlooOptions options;
      options.rank = r;
      options.size = world_size;
      options.timeout = absl::Seconds(30);
      std::unique_ptr<Communicator> communicator =
          *CreateGlooCommunicator(options, &rendezvous);
      std::vector<std::vector<Tensor>> params(kShapes.size());
      std::vector<ZeroParamGroup> groups(kShapes.size());
      for (size_t g = 0; g < kShapes.size(); ++g) {
        for (size_t i = 0; i < kShapes[g].size(); ++i) {
          params[g].push_back(Initial(g, i, kShapes[g][i]));
        }
        groups[g].hyperparameters = Hyper(kind)[g];
        for (Tensor& p : params[g]) groups[g].params.push_back(&p);
      }
      absl::StatusOr<std::unique_ptr<ZeroOptimizer>> zero =
          ZeroOptimizer::Create(communicator.get(), optimizer_kind, kind,
                                groups);
      ASSERT_TRUE(zero.ok()) << zero.status();
      for (int s = 0; s < kSteps; ++s) {
        std::vector<std::vector<Tensor>> grads(kShapes.size());
        std::vector<std::vector<const Tensor*>> pointers(kShapes.size());
        for (size_t g = 0; g < kShapes.size(); ++g) {
          for (size_t i = 0; i < kShapes[g].size(); ++i) {
            grads[g].push_back(Gradient(g, i, s, r, kShapes[g][i]));
          }
          for (const Tensor& t : grads[g]) pointers[g].push_back(&t);
        }
        absl::Status status = (*zero)->Step(pointers);
        ASSERT_TRUE(status.ok()) << status;
      }
      state_bytes[r] = (*zero)->state_bytes();
      finals[r] = std::move(params);
    });
  }
  for (std::thread& rank : ranks) rank.join();

  int64_t largest_state = 0;  // One parameter's state, at most.
  for (size_t g = 0; g < kShapes.size(); ++g) {
    for (size_t i = 0; i < kShapes[g].size(); ++i) {
      largest_state =
          std::max<int64_t>(largest_state, NumElements(kShapes[g][i]) * 4 *
                                               (kind == "sgd" ? 1 : 2));
      for (int r = 0; r < world_size; ++r) {
        ASSERT_EQ(std::memcmp(finals[r][g][i].data(), reference[g][i].data(),
                              reference[g][i].byte_size()),
                  0)
            << kind << ": rank " << r << " group " << g << " parameter " << i;
      }
    }
  }
  int64_t sum = 0;
  for (int r = 0; r < world_size; ++r) {
    sum += state_bytes[r];
    EXPECT_LE(std::abs(state_bytes[r] - total_state / world_size),
              largest_state)
        << "rank " << r;
  }
  EXPECT_EQ(sum, total_state);
}

TEST(ZeroOptimizerTest, SgdOnTwoRanksMatchesOneLocalOptimizer) {
  RunZero("sgd", 2);
}
TEST(ZeroOptimizerTest, AdamOnThreeRanksMatchesOneLocalOptimizer) {
  RunZero("adam", 3);
}
TEST(ZeroOptimizerTest, AdamOnTwoRanksMatchesOneLocalOptimizer) {
  RunZero("adam", 2);
}

TEST(ZeroOptimizerTest, MismatchedSpecificationsFailOnEveryRank) {
  auto registry = OptimizerRegistry::WithBuiltins();
  KeyValueStore store;
  LocalRendezvousStore rendezvous(&store);
  std::vector<absl::Status> results(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      GlooOptions options;
      options.rank = r;
      options.size = 3;
      options.timeout = absl::Seconds(30);
      std::unique_ptr<Communicator> communicator =
          *CreateGlooCommunicator(options, &rendezvous);
      Tensor p = Initial(0, 0, {8});
      ZeroParamGroup group;
      // Rank 2 was given another learning rate.
      group.hyperparameters = {{"lr", r == 2 ? 0.5 : 0.1}};
      group.params = {&p};
      results[r] = ZeroOptimizer::Create(communicator.get(),
                                         *registry->Find("sgd"), "sgd", {group})
                       .status();
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kFailedPrecondition) << r;
    EXPECT_THAT(results[r].message(),
                ::testing::HasSubstr("hyperparameters: rank(s) 2 differ"))
        << r;
  }
}

}  // namespace
}  // namespace distopt
