// Post-local SGD on 4 gloo ranks (threads, loopback TCP) with a
// hierarchical averager {2: 2, 4: 4}: every rank's parameters follow a
// reference that replays the schedule by hand (global gradient averaging
// before start_localsgd_iter, within pairs after; a local step on each
// rank; the mean of the group's parameters at each averaging step), the
// ranks of an averaging group are bit-identical right after it, a run
// resumed from state dicts equals an uninterrupted one bit for bit, and
// ranks at different steps are refused.
#include "server/localsgd/local_sgd_optimizer.h"

#include <cmath>
#include <cstring>
#include <mutex>

#include "common/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/comm/paired_communicator.h"
#include "server/comm/staged_communicator.h"
#include "server/comm/testing/counting_communicator.h"
#include "server/comm/testing/gloo_test_ranks.h"
#include "server/data_parallel/testing/test_values.h"
#include "server/optim/registry.h"

namespace distopt {
namespace {

using data_parallel_testing::FromFloats;
using data_parallel_testing::ParamSpec;
using data_parallel_testing::ToFloats;
using ::distopt::testing::CountingCommunicator;

constexpr int kWorld = 4;
const std::vector<std::vector<ParamSpec>> kModel = {
    {{{6, 5}, DType::kFloat32}, {{7}, DType::kBFloat16}},
    {{{11}, DType::kFloat32}}};

LocalSgdOptions Options() {
  LocalSgdOptions options;
  options.averager.kind = AveragerSpec::Kind::kHierarchical;
  options.averager.periods = {{2, 2}, {4, 4}};
  options.averager.warmup_steps = 3;
  options.start_localsgd_iter = 3;
  options.subgroup_size = 2;
  return options;
}

absl::flat_hash_map<std::string, HyperValue> Hyper(size_t g) {
  if (g == 0) return {{"lr", 0.1}, {"momentum", 0.9}};
  return {{"lr", 0.05}};
}

// [rank][group][index].
using Model = std::vector<std::vector<std::vector<Tensor>>>;

Model InitialModel() {
  Model model(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    model[r].resize(kModel.size());
    for (size_t g = 0; g < kModel.size(); ++g) {
      for (size_t i = 0; i < kModel[g].size(); ++i) {
        model[r][g].push_back(
            data_parallel_testing::Initial(g, i, kModel[g][i]));
      }
    }
  }
  return model;
}

// The mean over `ranks` of their values of parameter (g, i), in fp32.
std::vector<float> Mean(const Model& model, const std::vector<int>& ranks,
                        size_t g, size_t i,
                        const std::function<std::vector<float>(int)>& value) {
  std::vector<float> sum(NumElements(kModel[g][i].shape), 0.0f);
  for (int r : ranks) {
    std::vector<float> v = value(r);
    for (size_t e = 0; e < sum.size(); ++e) sum[e] += v[e];
  }
  for (float& x : sum) x *= 1.0f / ranks.size();
  return sum;
}

// Replays `steps` steps by hand; snapshots[s] is the model after step s.
std::vector<Model> Reference(int steps) {
  auto registry = OptimizerRegistry::WithBuiltins();
  const LocalSgdOptions options = Options();
  std::vector<std::string> warnings;
  ModelAverager averager =
      *ModelAverager::Create(options.averager, kWorld, &warnings);
  Model model = InitialModel();
  std::vector<std::vector<std::unique_ptr<FunctionalOptimizer>>> local(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    for (size_t g = 0; g < kModel.size(); ++g) {
      std::vector<ParameterLayout> layouts;
      for (const ParamSpec& p : kModel[g])
        layouts.push_back({p.dtype, p.shape});
      local[r].push_back(*FunctionalOptimizer::Create(*registry->Find("sgd"),
                                                      Hyper(g), layouts));
    }
  }
  std::vector<Model> snapshots;
  for (int s = 0; s < steps; ++s) {
    const int reduce = s < options.start_localsgd_iter ? kWorld : 2;
    for (int r = 0; r < kWorld; ++r) {
      std::vector<int> peers;
      for (int q = r / reduce * reduce; q < (r / reduce + 1) * reduce; ++q) {
        peers.push_back(q);
      }
      for (size_t g = 0; g < kModel.size(); ++g) {
        std::vector<Tensor> grads;
        std::vector<Tensor*> params;
        std::vector<const Tensor*> pointers;
        for (size_t i = 0; i < kModel[g].size(); ++i) {
          grads.push_back(FromFloats(Mean(model, peers, g, i,
                                          [&](int q) {
                                            return ToFloats(
                                                data_parallel_testing::Gradient(
                                                    g, i, s, q, kModel[g][i]));
                                          }),
                                     kModel[g][i]));
          params.push_back(&model[r][g][i]);
        }
        for (const Tensor& t : grads) pointers.push_back(&t);
        EXPECT_TRUE(local[r][g]->Step(params, pointers).ok());
      }
    }
    if (std::optional<int> size = averager.GroupSizeAt(s); size && *size > 1) {
      Model before = model;
      for (int r = 0; r < kWorld; ++r) {
        std::vector<int> peers;
        for (int q = r / *size * *size; q < (r / *size + 1) * *size; ++q) {
          peers.push_back(q);
        }
        for (size_t g = 0; g < kModel.size(); ++g) {
          for (size_t i = 0; i < kModel[g].size(); ++i) {
            model[r][g][i] = FromFloats(
                Mean(before, peers, g, i,
                     [&](int q) { return ToFloats(before[q][g][i]); }),
                kModel[g][i]);
          }
        }
      }
    }
    averager.Advance();
    Model copy = InitialModel();
    for (int r = 0; r < kWorld; ++r) {
      for (size_t g = 0; g < kModel.size(); ++g) {
        for (size_t i = 0; i < kModel[g].size(); ++i) {
          std::memcpy(copy[r][g][i].data(), model[r][g][i].data(),
                      model[r][g][i].byte_size());
        }
      }
    }
    snapshots.push_back(std::move(copy));
  }
  return snapshots;
}

struct RankRun {
  std::vector<Model> snapshots;  // [step] -> whole model, filled per rank.
  std::vector<OptimizerStateDict> state_dicts;
  std::vector<int64_t> steps;
  std::vector<absl::Status> errors;
  std::vector<int64_t> scratch_bytes;
  std::vector<int64_t> control_bytes;  // With staged communicators.
};

// The group of a test whose tensors go through staged communicators of
// `chunk_bytes` (host memory standing in for a GPU), the whole group's and
// each subgroup's, as a group of GPU ranks sharing one does; its control
// communicators count what they carry into `*control_bytes`.
template <typename Body>
void OnStagedGroups(size_t chunk_bytes, std::vector<int64_t>* control_bytes,
                    Body body) {
  GlooOptions base;
  base.timeout = absl::Seconds(30);
  absl::Status made = OnGlooThreads(
      kWorld, base,
      [&](Communicator& gloo, const GlooOptions& options,
          RendezvousStore* rendezvous) {
        // The whole group's control and each subgroup's, counted.
        std::vector<std::unique_ptr<CountingCommunicator>> counters;
        std::vector<std::unique_ptr<Communicator>> subgroups;
        counters.push_back(std::make_unique<CountingCommunicator>(gloo));
        PairedCommunicator global(
            counters[0].get(),
            CreateStagedCommunicator(&gloo, CpuBackend(), chunk_bytes));
        GlooCommunicatorGroup group(
            &global, options, rendezvous,
            [&](std::unique_ptr<Communicator> control, const std::string&)
                -> absl::StatusOr<std::unique_ptr<Communicator>> {
              Communicator* host = control.get();
              subgroups.push_back(std::move(control));
              counters.push_back(std::make_unique<CountingCommunicator>(*host));
              return std::unique_ptr<Communicator>(
                  std::make_unique<PairedCommunicator>(
                      counters.back().get(),
                      CreateStagedCommunicator(host, CpuBackend(),
                                               chunk_bytes)));
            });
        body(group);
        int64_t bytes = 0;
        for (const auto& counter : counters) {
          bytes += counter->all_reduce_bytes + counter->reduce_scatter_bytes +
                   counter->all_gather_bytes + counter->broadcast_bytes;
        }
        (*control_bytes)[gloo.rank()] = bytes;
      });
  ASSERT_TRUE(made.ok()) << made;
}

// Runs steps [first, last) on every rank, starting from `start` and, when
// given, the state dicts of an earlier run; with `staged_chunk_bytes`, on
// OnStagedGroups.
void RunRanks(int first, int last, const Model& start, RankRun& run,
              const RankRun* resume = nullptr,
              const LocalSgdOptions& options = Options(),
              size_t staged_chunk_bytes = 0) {
  auto registry = OptimizerRegistry::WithBuiltins();
  run.snapshots.clear();
  for (int s = first; s < last; ++s) run.snapshots.push_back(InitialModel());
  run.state_dicts.resize(kWorld);
  run.steps.resize(kWorld);
  run.errors.resize(kWorld);
  run.scratch_bytes.resize(kWorld);
  run.control_bytes.assign(kWorld, 0);
  auto on_rank = [&](CommunicatorGroup& group) {
    const int r = group.global().rank();
    std::vector<std::vector<Tensor>> params(kModel.size());
    std::vector<ParamGroup> groups(kModel.size());
    for (size_t g = 0; g < kModel.size(); ++g) {
      for (size_t i = 0; i < kModel[g].size(); ++i) {
        params[g].push_back(
            *start[r][g][i].CloneTo(*GetBackend(Device::Cpu())));
      }
      groups[g].hyperparameters = Hyper(g);
      for (Tensor& p : params[g]) groups[g].params.push_back(&p);
    }
    std::vector<std::string> warnings;
    auto optimizer = LocalSgdOptimizer::Create(
        group, *registry->Find("sgd"), "sgd", groups, options, &warnings);
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    if (resume != nullptr) {
      ASSERT_TRUE((*optimizer)
                      ->LoadStateDict(resume->state_dicts[r], resume->steps[r],
                                      &warnings)
                      .ok());
    }
    for (int s = first; s < last; ++s) {
      std::vector<std::vector<Tensor>> grads(kModel.size());
      std::vector<std::vector<const Tensor*>> pointers(kModel.size());
      for (size_t g = 0; g < kModel.size(); ++g) {
        for (size_t i = 0; i < kModel[g].size(); ++i) {
          grads[g].push_back(
              data_parallel_testing::Gradient(g, i, s, r, kModel[g][i]));
        }
        for (const Tensor& t : grads[g]) pointers[g].push_back(&t);
      }
      absl::Status status = (*optimizer)->Step(group, pointers);
      ASSERT_TRUE(status.ok())
          << "rank " << r << " step " << s << ": " << status;
      for (size_t g = 0; g < kModel.size(); ++g) {
        for (size_t i = 0; i < kModel[g].size(); ++i) {
          std::memcpy(run.snapshots[s - first][r][g][i].data(),
                      params[g][i].data(), params[g][i].byte_size());
        }
      }
    }
    run.state_dicts[r] = *(*optimizer)->StateDict();
    run.steps[r] = (*optimizer)->step();
    run.scratch_bytes[r] = (*optimizer)->scratch_bytes();
  };
  if (staged_chunk_bytes == 0) {
    OnGlooGroups(kWorld, on_rank);
  } else {
    OnStagedGroups(staged_chunk_bytes, &run.control_bytes, on_rank);
  }
}

bool Close(const Tensor& got, const Tensor& expected) {
  const std::vector<float> a = ToFloats(got), b = ToFloats(expected);
  const double tolerance =
      got.dtype() == DType::kFloat32 ? 1e-5 : 1.0 / 128;  // bf16: 1 ulp.
  for (size_t e = 0; e < a.size(); ++e) {
    if (std::abs(a[e] - b[e]) > tolerance * std::max(1.0f, std::abs(b[e]))) {
      return false;
    }
  }
  return true;
}

bool Same(const Tensor& a, const Tensor& b) {
  return std::memcmp(a.data(), b.data(), a.byte_size()) == 0;
}

TEST(PostLocalSgdTest, FollowsTheScheduleAndAveragesWithinEachGroup) {
  constexpr int kSteps = 12;
  const std::vector<Model> reference = Reference(kSteps);
  RankRun run;
  RunRanks(0, kSteps, InitialModel(), run);
  std::vector<std::string> warnings;
  ModelAverager averager =
      *ModelAverager::Create(Options().averager, kWorld, &warnings);
  int averaged_in_pairs = 0, averaged_globally = 0;
  for (int s = 0; s < kSteps; ++s) {
    const int size = averager.GroupSizeAt(s).value_or(0);
    averaged_in_pairs += size == 2;
    averaged_globally += size == 4;
    for (int r = 0; r < kWorld; ++r) {
      for (size_t g = 0; g < kModel.size(); ++g) {
        for (size_t i = 0; i < kModel[g].size(); ++i) {
          const Tensor& mine = run.snapshots[s][r][g][i];
          EXPECT_TRUE(Close(mine, reference[s][r][g][i]))
              << "step " << s << " rank " << r << " " << g << "/" << i
              << " got " << ToFloats(mine)[0] << " expected "
              << ToFloats(reference[s][r][g][i])[0];
          // Right after averaging, the group is bit-identical; ranks that
          // did not average together differ.
          if (size > 1) {
            const int first = r / size * size;
            EXPECT_TRUE(Same(mine, run.snapshots[s][first][g][i]))
                << "step " << s << " rank " << r;
          }
          if (size == 2 && r >= 2) {
            EXPECT_FALSE(Same(mine, run.snapshots[s][0][g][i]))
                << "step " << s << " rank " << r;
          }
        }
      }
    }
  }
  EXPECT_EQ(averaged_in_pairs, 2);  // Steps 6 and 10.

  EXPECT_EQ(averaged_globally, 2);  // Steps 4 and 8.
}

// Buckets of 32 bytes (8 values: several per step, larger parameters
// alone) reduce the gradients and average the parameters to the model the
// default 25 MiB bucket gives, within fp32 summation order (the averaged
// parameters are not exact sums; another layout adds them in another
// order).
TEST(PostLocalSgdTest, SmallBucketsGiveTheSameModel) {
  constexpr int kSteps = 9;
  RankRun whole, bucketed;
  RunRanks(0, kSteps, InitialModel(), whole);
  LocalSgdOptions options = Options();
  options.bucket_bytes = 32;
  RunRanks(0, kSteps, InitialModel(), bucketed, nullptr, options);
  for (int r = 0; r < kWorld; ++r) {
    // One bucket is the whole model by default; with 32-byte buckets the
    // largest holds one parameter (30 values), and the fp32 ones are
    // averaged where they lie. Both round the bf16 parameter's 7 averaged
    // gradients into 14 bytes.
    EXPECT_EQ(whole.scratch_bytes[r], 2 * 48 * 4 + 14) << "rank " << r;
    EXPECT_EQ(bucketed.scratch_bytes[r], (30 + 7) * 4 + 14) << "rank " << r;
  }
  for (int s = 0; s < kSteps; ++s) {
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_TRUE(bucketed.errors[r].ok()) << bucketed.errors[r];
      for (size_t g = 0; g < kModel.size(); ++g) {
        for (size_t i = 0; i < kModel[g].size(); ++i) {
          EXPECT_TRUE(Close(bucketed.snapshots[s][r][g][i],
                            whole.snapshots[s][r][g][i]))
              << "step " << s << " rank " << r << " " << g << "/" << i;
        }
      }
    }
  }
}

// A group of GPU ranks sends its tensors through other communicators than
// its control collectives (NCCL, or gloo staged through host memory), for
// the whole group and each subgroup: through staged ones of small chunks
// the run follows the same schedule to the reference, and the control
// communicators carry less than one step's gradients.
TEST(PostLocalSgdTest, ThroughStagedCommunicatorsTheRunIsTheSame) {
  constexpr int kSteps = 9;
  const std::vector<Model> reference = Reference(kSteps);
  LocalSgdOptions options = Options();
  options.bucket_bytes = 64;
  RankRun run;
  RunRanks(0, kSteps, InitialModel(), run, nullptr, options,
           /*staged_chunk_bytes=*/40);
  int64_t model_bytes = 0;
  const Model model = InitialModel();
  for (const auto& group : model[0]) {
    for (const Tensor& p : group) model_bytes += p.byte_size();
  }
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_LT(run.control_bytes[r], model_bytes) << "rank " << r;
    for (int s = 0; s < kSteps; ++s) {
      for (size_t g = 0; g < kModel.size(); ++g) {
        for (size_t i = 0; i < kModel[g].size(); ++i) {
          EXPECT_TRUE(Close(run.snapshots[s][r][g][i], reference[s][r][g][i]))
              << "step " << s << " rank " << r << " " << g << "/" << i;
        }
      }
    }
  }
}

TEST(PostLocalSgdTest, AResumedRunEqualsAnUninterruptedOne) {
  RankRun whole;
  RunRanks(0, 10, InitialModel(), whole);
  RankRun first;
  RunRanks(0, 5, InitialModel(), first);
  EXPECT_THAT(first.steps, ::testing::Each(5));
  RankRun second;
  RunRanks(5, 10, first.snapshots.back(), second, &first);
  for (int r = 0; r < kWorld; ++r) {
    for (size_t g = 0; g < kModel.size(); ++g) {
      for (size_t i = 0; i < kModel[g].size(); ++i) {
        EXPECT_TRUE(Same(second.snapshots.back()[r][g][i],
                         whole.snapshots.back()[r][g][i]))
            << "rank " << r << " " << g << "/" << i;
      }
    }
  }
}

TEST(PostLocalSgdTest, RanksAtDifferentStepsAreRefusedAndMisspecsNamed) {
  auto registry = OptimizerRegistry::WithBuiltins();
  std::vector<absl::Status> stepped(kWorld), created(kWorld);
  std::vector<std::vector<std::string>> warnings(kWorld);
  OnGlooGroups(kWorld, [&](CommunicatorGroup& group) {
    const int r = group.global().rank();
    Tensor p = data_parallel_testing::Initial(0, 0, ParamSpec{{4}});
    ParamGroup params;
    params.hyperparameters = {{"lr", 0.1}};
    params.params = {&p};
    LocalSgdOptions options = Options();
    options.start_localsgd_iter = 5;  // Not the warm-up: a warning.
    auto optimizer = LocalSgdOptimizer::Create(
        group, *registry->Find("sgd"), "sgd", {params}, options, &warnings[r]);
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    // Rank 3 loads a state dict without a step, the others one at step 2.
    OptimizerStateDict dict = *(*optimizer)->StateDict();
    ASSERT_TRUE((*optimizer)
                    ->LoadStateDict(
                        dict, r == 3 ? std::nullopt : std::optional<int64_t>(2),
                        &warnings[r])
                    .ok());
    Tensor grad = data_parallel_testing::Gradient(0, 0, 0, r, ParamSpec{{4}});
    stepped[r] = (*optimizer)->Step(group, {{&grad}});
    // A rank whose averager differs fails every rank's creation.
    options.averager.warmup_steps = r == 1 ? 4 : 3;
    created[r] = LocalSgdOptimizer::Create(group, *registry->Find("sgd"), "sgd",
                                           {params}, options, &warnings[r])
                     .status();
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(stepped[r].code(), absl::StatusCode::kFailedPrecondition) << r;
    EXPECT_THAT(stepped[r].message(), ::testing::HasSubstr("at step"));
    EXPECT_EQ(created[r].code(), absl::StatusCode::kFailedPrecondition) << r;
    EXPECT_THAT(created[r].message(),
                ::testing::HasSubstr("averager: rank(s) 1 differ"));
    EXPECT_THAT(warnings[r], ::testing::Contains(::testing::HasSubstr(
                                 "differs from the averager's warmup_steps")));
  }
  EXPECT_THAT(warnings[3],
              ::testing::Contains(::testing::HasSubstr("has no step")));
}

}  // namespace
}  // namespace distopt
