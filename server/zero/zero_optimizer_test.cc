// ZeRO across ranks over real gloo (loopback TCP, one thread per rank):
// after every scenario all ranks' parameters are identical and equal, bit
// for bit, to one local optimizer per group fed the averaged gradients;
// each rank holds about 1/W of the optimizer state. Scenarios cover both
// ways of sending parameters, overlap, mixed dtypes, gradients missing on
// some ranks, ranks that run out of data (Join), and a group added midway.
#include "server/zero/zero_optimizer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/comm/forwarding_communicator.h"
#include "server/optim/registry.h"
#include "server/zero/zero_scenario.h"

namespace distopt {
namespace {

using ::distopt::testing::CountingCommunicator;
using zero_testing::Outcome;
using zero_testing::ParamSpec;
using zero_testing::Scenario;

constexpr DType kF32 = DType::kFloat32;
constexpr DType kF16 = DType::kFloat16;
constexpr DType kBF16 = DType::kBFloat16;

Scenario BaseScenario(const std::string& kind, int world, bool mixed) {
  Scenario s;
  s.kind = kind;
  s.world = world;
  s.groups = {{{{40, 25}, kF32},
               {{25}, mixed ? kF16 : kF32},
               {{7}, kF32},
               {{300}, mixed ? kBF16 : kF32}},
              {{{13, 9}, kF32}, {{}, kF32}, {{64}, mixed ? kF16 : kF32}}};
  if (kind == "sgd") {
    s.hyperparameters = {{{"lr", 0.1}, {"momentum", 0.9}}, {{"lr", 0.05}}};
  } else {
    s.hyperparameters = {{{"lr", 0.01}},
                         {{"lr", 0.02}, {"weight_decay", 0.01}}};
  }
  return s;
}

void ExpectMatchesReference(const Scenario& scenario, const Outcome& outcome) {
  for (size_t g = 0; g < scenario.groups.size(); ++g) {
    for (size_t i = 0; i < scenario.groups[g].size(); ++i) {
      const Tensor& expected = outcome.reference[g][i];
      for (int r = 0; r < scenario.world; ++r) {
        ASSERT_EQ(outcome.ranks[r].size(), scenario.groups.size());
        const Tensor& got = outcome.ranks[r][g][i];
        ASSERT_EQ(got.byte_size(), expected.byte_size());
        EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.byte_size()), 0)
            << "rank " << r << " group " << g << " parameter " << i;
      }
    }
  }
  int64_t sum = 0;
  for (int r = 0; r < scenario.world; ++r) {
    sum += outcome.state_bytes[r];
    EXPECT_LE(std::abs(outcome.state_bytes[r] -
                       outcome.reference_state_bytes / scenario.world),
              outcome.largest_parameter_state)
        << "rank " << r;
  }
  EXPECT_EQ(sum, outcome.reference_state_bytes);
}

// (kind, world size, parameters_as_bucket_view, overlap, mixed dtypes,
// gradient_sharded, small buckets).
using Options = std::tuple<std::string, int, bool, bool, bool, bool, bool>;
class ZeroOptimizerTest : public ::testing::TestWithParam<Options> {};

// Every mode ends bit for bit where one local optimizer fed the averaged
// gradients does: the test values make every sum exact in any order, so
// this holds at any world size (with real gradients, W > 2 may differ by
// fp32 summation order, as any two reduction orders do).
TEST_P(ZeroOptimizerTest, TenStepsMatchOneLocalOptimizerBitForBit) {
  const auto& [kind, world, buckets, overlap, mixed, sharded, small] =
      GetParam();
  Scenario s = BaseScenario(kind, world, mixed);
  s.options.parameters_as_bucket_view = buckets;
  s.options.overlap = overlap;
  s.options.gradient_sharded = sharded;
  // Small buckets: several per step; a parameter larger than one alone,
  // or, gradient-sharded, sliced across several.
  if (small) s.options.bucket_bytes = 1024;
  // Some gradients are missing on one rank (averaged with zeros), and one
  // parameter has none anywhere at step 2 (skipped everywhere).
  s.has_gradient = [](int step, int rank, int g, int i) {
    if (step % 3 == 1 && rank == 0 && i == 1) return false;
    return !(step == 2 && g == 1 && i == 0);
  };
  ExpectMatchesReference(s, zero_testing::Run(s));
}

// A group of GPU ranks sends its tensors through another communicator than
// its control collectives (NCCL, or gloo staged through host memory): with
// a staged one of small chunks (host memory standing in for the GPU), every
// mode, with mixed dtypes, still ends bit for bit at the reference, so the
// optimizer sends every gradient and parameter through tensors().
TEST(ZeroStagedTensorsTest, EveryModeThroughAStagedCommunicatorMatches) {
  for (int world : {2, 3}) {
    for (int mode = 0; mode < 4; ++mode) {
      Scenario s = BaseScenario("adam", world, /*mixed=*/true);
      s.steps = 4;
      s.options.parameters_as_bucket_view = mode == 1;
      s.options.overlap = mode == 2 || mode == 3;
      s.options.gradient_sharded = mode == 3;
      s.options.bucket_bytes = 1024;
      s.staged_chunk_bytes = 96;
      SCOPED_TRACE(absl::StrCat("world ", world, " mode ", mode));
      const Outcome outcome = zero_testing::Run(s);
      ExpectMatchesReference(s, outcome);
      // Each step reduces every gradient: through the control communicator
      // only the steps' headers and agreements, far less than the model.
      int64_t model_bytes = 0;
      for (const auto& group : outcome.reference) {
        for (const Tensor& p : group) model_bytes += p.byte_size();
      }
      for (int r = 0; r < world; ++r) {
        EXPECT_LT(outcome.control_bytes[r], model_bytes) << "rank " << r;
      }
    }
  }
}

// The scratch a rank reports counts what the tensors' communicator keeps
// for the step's collectives: through a staged communicator, its two
// page-locked chunks, as large as the chunks taken (here smaller than a
// bucket). Larger chunks make the scratch grow by the two chunks' growth
// at least (gloo's own ring, which the staged pieces go through, grows by
// less).
TEST(ZeroStagedTensorsTest, ScratchCountsTheStagingChunks) {
  constexpr int64_t kSmall = 96, kLarge = 480;
  for (bool sharded : {false, true}) {
    Scenario s = BaseScenario("adam", 2, /*mixed=*/true);
    s.steps = 2;
    s.options.gradient_sharded = sharded;
    s.options.bucket_bytes = 1024;
    s.staged_chunk_bytes = kSmall;
    const Outcome small = zero_testing::Run(s);
    s.staged_chunk_bytes = kLarge;
    const Outcome large = zero_testing::Run(s);
    for (int r = 0; r < 2; ++r) {
      EXPECT_GT(small.scratch_bytes[r], 2 * kSmall);
      EXPECT_GE(large.scratch_bytes[r] - small.scratch_bytes[r],
                2 * (kLarge - kSmall))
          << "rank " << r << " sharded=" << sharded;
    }
  }
}

// Parameters of 800 KiB to 6.4 MiB: the gradient-sharded gather sends them
// (and their slices, 256 KiB or more on average in every bucket) straight
// between the tensors (the ring over one buffer per segment), not packed;
// every rank still ends bit for bit at the reference.
TEST(ZeroLargeParametersTest, TheSegmentRingMatchesTheReference) {
  for (int world : {2, 3, 4}) {
    for (bool overlap : {false, true}) {
      Scenario s;
      s.kind = "adam";
      s.world = world;
      s.steps = 3;
      s.groups = {{{{200 * 1024}, kF32},
                   {{1600 * 1024}, kF32},
                   {{400 * 1024}, kF32},
                   {{1200 * 1024}, kF32},
                   {{256, 1024}, kF32},
                   {{800 * 1024}, kF32}}};
      s.hyperparameters = {{{"lr", 0.01}}};
      s.options.gradient_sharded = true;
      s.options.overlap = overlap;
      // 5 to 12 buckets, parameters sliced in each world and mode, none
      // packed.
      s.options.bucket_bytes = 8 << 20;
      ExpectMatchesReference(s, zero_testing::Run(s));
    }
  }
}

// With gradients whose sums are not exact, the reduction's order matters at
// W > 2 (a ring adds the ranks' values in another order than the
// reference's loop): every rank still ends with the same bytes as every
// other, and within fp32 rounding of the reference. (At W = 2 a sum of two
// values has one order; the tests above are bit for bit.)
TEST(ZeroRoundingTest, RealGradientsAgreeAcrossRanksAndWithinRounding) {
  for (int world : {3, 4}) {
    for (bool sharded : {false, true}) {
      Scenario s = BaseScenario("adam", world, /*mixed=*/false);
      s.options.gradient_sharded = sharded;
      s.options.bucket_bytes = 1024;
      s.steps = 5;
      s.gradient = [](int g, int i, int step, int r, const ParamSpec& spec) {
        std::vector<float> values(NumElements(spec.shape));
        for (size_t e = 0; e < values.size(); ++e) {
          values[e] = 0.1f * std::sin(0.37f * static_cast<float>(e) +
                                      1.3f * static_cast<float>(r) +
                                      0.7f * static_cast<float>(step + g + i));
        }
        return zero_testing::FromFloats(values, spec);
      };
      const Outcome outcome = zero_testing::Run(s);
      for (size_t g = 0; g < s.groups.size(); ++g) {
        for (size_t i = 0; i < s.groups[g].size(); ++i) {
          const std::vector<float> expected =
              zero_testing::ToFloats(outcome.reference[g][i]);
          const std::vector<float> first =
              zero_testing::ToFloats(outcome.ranks[0][g][i]);
          for (int r = 1; r < world; ++r) {
            EXPECT_EQ(zero_testing::ToFloats(outcome.ranks[r][g][i]), first)
                << "world " << world << " rank " << r;
          }
          for (size_t e = 0; e < expected.size(); ++e) {
            EXPECT_NEAR(first[e], expected[e],
                        1e-5f * std::max(1.0f, std::abs(expected[e])))
                << "world " << world << " group " << g << " parameter " << i
                << " element " << e;
          }
        }
      }
    }
  }
}

std::string VariantName(const ::testing::TestParamInfo<Options>& info) {
  const auto& [kind, world, buckets, overlap, mixed, sharded, small] =
      info.param;
  return absl::StrCat(kind, "_world", world, buckets ? "_buckets" : "",
                      overlap ? "_overlap" : "", mixed ? "_mixed" : "",
                      sharded ? "_sharded" : "", small ? "_small" : "");
}

INSTANTIATE_TEST_SUITE_P(
    Variants, ZeroOptimizerTest,
    ::testing::Values(Options{"sgd", 2, false, false, false, false, false},
                      Options{"adam", 3, false, false, false, false, false},
                      Options{"adam", 2, true, false, false, false, false},
                      Options{"adam", 3, false, true, false, false, false},
                      Options{"sgd", 3, true, true, false, false, false},
                      Options{"adam", 2, true, true, true, false, false},
                      Options{"adam", 3, false, false, true, false, false},
                      Options{"adam", 4, false, false, false, false, true},
                      Options{"adam", 3, true, true, true, false, true},
                      Options{"sgd", 2, false, false, false, true, false},
                      Options{"adam", 2, true, false, true, true, true},
                      Options{"adam", 3, false, true, false, true, true},
                      Options{"adam", 4, true, true, true, true, true},
                      Options{"sgd", 4, false, false, false, true, false}),
    VariantName);

TEST(ZeroJoinTest, RanksThatRunOutOfDataShadowTheOthers) {
  for (bool overlap : {false, true}) {
    Scenario s = BaseScenario("adam", 3, /*mixed=*/false);
    s.options.overlap = overlap;
    s.options.gradient_sharded = overlap;  // Both modes, in the two runs.
    s.options.bucket_bytes = 1024;
    s.steps = 6;
    // Rank 2 runs out after 2 steps and rank 0 after 4; their missing
    // gradients count as zeros in the others' averages.
    s.data_steps = {4, 6, 2};
    const Outcome outcome = zero_testing::Run(s);
    ExpectMatchesReference(s, outcome);
    EXPECT_THAT(outcome.shadowed_steps, ::testing::ElementsAre(2, 0, 4));
  }
}

TEST(ZeroAddParamGroupTest, AGroupAddedMidwayStepsFromThenOn) {
  for (int world : {2, 3}) {
    Scenario s = BaseScenario("adam", world, /*mixed=*/true);
    s.options.parameters_as_bucket_view = true;
    s.options.gradient_sharded = world == 3;
    s.options.bucket_bytes = 1024;
    s.add_last_group_at = 3;
    ExpectMatchesReference(s, zero_testing::Run(s));
  }
}

// Each rank's ZeroOptimizer::Create of `kind` over one parameter of 8
// values, with the hyperparameters hyperparameters(rank) gives it.
std::vector<absl::Status> CreateOnRanks(
    int world, const std::string& kind,
    const std::function<absl::flat_hash_map<std::string, HyperValue>(int)>&
        hyperparameters) {
  auto registry = OptimizerRegistry::WithBuiltins();
  std::vector<absl::Status> results(world);
  zero_testing::OnRanks(world, [&](Communicator& communicator) {
    const int r = communicator.rank();
    Tensor p = zero_testing::Initial(0, 0, ParamSpec{{8}});
    ParamGroup group;
    group.hyperparameters = hyperparameters(r);
    group.params = {&p};
    results[r] = ZeroOptimizer::Create(&communicator, *registry->Find(kind),
                                       kind, {group})
                     .status();
  });
  return results;
}

TEST(ZeroOptimizerCreateTest, MismatchedSpecificationsFailOnEveryRank) {
  // Rank 2 was given another learning rate.
  const std::vector<absl::Status> results = CreateOnRanks(
      3, "sgd", [](int r) -> absl::flat_hash_map<std::string, HyperValue> {
        return {{"lr", r == 2 ? 0.5 : 0.1}};
      });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kFailedPrecondition) << r;
    EXPECT_THAT(results[r].message(),
                ::testing::HasSubstr("hyperparameters: rank(s) 2 differ"))
        << r;
  }
}

// torch's param_groups hold every hyperparameter, given or defaulted: a
// rank that spells out a default agrees with one that leaves it out.
TEST(ZeroOptimizerCreateTest, AGivenDefaultAgreesWithALeftOutOne) {
  // Adam's defaults, on rank 0 only.
  const std::vector<absl::Status> results = CreateOnRanks(
      2, "adam", [](int r) -> absl::flat_hash_map<std::string, HyperValue> {
        if (r != 0) return {};
        return {{"lr", 1e-3},
                {"betas", std::make_pair(0.9, 0.999)},
                {"amsgrad", false}};
      });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(results[r].ok()) << results[r];
}

TEST(ZeroOptimizerCreateTest, AParameterOneRankCannotTakeFailsEveryRank) {
  auto registry = OptimizerRegistry::WithBuiltins();
  std::vector<absl::Status> results(2);
  zero_testing::OnRanks(2, [&](Communicator& communicator) {
    const int r = communicator.rank();
    Tensor p = *Tensor::AllocateHost(r == 1 ? DType::kInt64 : kF32, {8});
    ParamGroup group;
    group.hyperparameters = {{"lr", 0.1}};
    group.params = {&p};
    results[r] = ZeroOptimizer::Create(&communicator, *registry->Find("sgd"),
                                       "sgd", {group})
                     .status();
  });
  EXPECT_EQ(results[1].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(results[1].message(),
              ::testing::HasSubstr("groups[0].params[0]"));
  EXPECT_EQ(results[0].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(results[0].message(), ::testing::HasSubstr("rank 1 refused"));
}

// Each rank reserves its partition's optimizer state in its budget at
// creation; a rank whose budget cannot hold it fails the creation on every
// rank, before any step could fail half-way for want of memory.
TEST(ZeroOptimizerCreateTest, StateThatDoesNotFitOneRanksBudgetFailsEveryRank) {
  auto registry = OptimizerRegistry::WithBuiltins();
  std::vector<absl::Status> results(2);
  std::vector<uint64_t> reserved(2);
  zero_testing::OnRanks(2, [&](Communicator& communicator) {
    const int r = communicator.rank();
    // Two parameters of 1000 floats, one per rank; Adam keeps two buffers.
    Tensor a = *Tensor::AllocateHost(kF32, {1000});
    Tensor b = *Tensor::AllocateHost(kF32, {1000});
    ParamGroup group;
    group.hyperparameters = {{"lr", 0.1}};
    group.params = {&a, &b};
    MemoryBudget budget(0, r == 1 ? 4000 : 100000);
    auto zero = ZeroOptimizer::Create(&communicator, *registry->Find("adam"),
                                      "adam", {group}, {}, &budget);
    results[r] = zero.status();
    reserved[r] = budget.used_bytes();
  });
  EXPECT_EQ(results[1].code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(results[1].message(),
              ::testing::HasSubstr("the optimizer's state"));
  EXPECT_EQ(results[0].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(results[0].message(), ::testing::HasSubstr("rank 1 refused"));
  EXPECT_EQ(reserved[0], 0u);  // Nothing kept on the rank that could.
}

constexpr int64_t kScratchBucketBytes = 16 << 10;

// Two steps on 2 ranks of `params` equal parameters of `elements` floats,
// in buckets of `bucket_bytes`; every rank ends at the reference.
// Every rank has every gradient, unless `one_missing`: rank 1 has none
// for parameter 0 (so that the gradients are copied into buckets, zeros
// for that one, rather than reduced where they are).
Outcome RunScratchScenario(const std::string& kind, int params,
                           int64_t elements, bool sharded, bool overlap,
                           bool bucket_view = false, bool one_missing = false,
                           int64_t bucket_bytes = kScratchBucketBytes) {
  Scenario s;
  if (one_missing) {
    s.has_gradient = [](int, int r, int, int i) { return r != 1 || i != 0; };
  }
  s.kind = kind;
  s.world = 2;
  s.steps = 2;
  s.groups = {std::vector<ParamSpec>(params, ParamSpec{{elements}})};
  s.hyperparameters = {{{"lr", 0.01}}};
  s.options.gradient_sharded = sharded;
  s.options.overlap = overlap;
  s.options.parameters_as_bucket_view = bucket_view;
  s.options.bucket_bytes = bucket_bytes;
  Outcome outcome = zero_testing::Run(s);
  ExpectMatchesReference(s, outcome);
  return outcome;
}

// The step's scratch is bounded by the bucket size, not by the model: a
// model of 160 parameters of 1024 floats (640 KiB) with 16 KiB buckets
// keeps two gradient buckets and one parameter bucket at most.
TEST(ZeroScratchTest, ScratchIsBoundedByTheBucketNotTheModel) {
  for (bool sharded : {false, true}) {
    for (bool overlap : {false, true}) {
      const Outcome outcome =
          RunScratchScenario("sgd", 160, 1024, sharded, overlap,
                             /*bucket_view=*/true);
      for (int r = 0; r < 2; ++r) {
        EXPECT_GT(outcome.scratch_bytes[r], 0);
        EXPECT_LE(outcome.scratch_bytes[r], 3 * kScratchBucketBytes)
            << "rank " << r << " sharded=" << sharded << " overlap=" << overlap;
      }
    }
  }
}

// Gradient-sharded, parameters larger than a rank's share of a bucket are
// sliced and stepped slice by slice, so no buffer holds a whole one:
// parameters of 750000 floats (3 MB) in 512 KiB buckets keep the gradient
// scratch when copied into buckets (as when a rank lacks a gradient: a
// bucket, or two of half of it with overlap), the ring's two chunks (of a
// block, half a bucket at most) and at most a bucket for the all-gather's
// packing. Reduced where they are, the averages are stepped piece by piece
// out of the ring's chunks: no gradient scratch at all, the chunks and the
// packing alone. A buffer of one parameter would
// not fit in either. With 3 parameters, rank 0 owns two: the last buckets
// hold its slices alone, and its blocks keep to half a bucket still.
TEST(ZeroScratchTest, SlicedParametersAreSteppedWithoutAWholeCopy) {
  constexpr int64_t kBucket = 512 << 10;
  constexpr int64_t kElements = 750000;
  static_assert(kElements * sizeof(float) > 3 * kBucket);
  for (int params : {4, 3}) {
    for (bool in_place : {false, true}) {
      for (bool overlap : {false, true}) {
        const Outcome outcome = RunScratchScenario(
            "adam", params, kElements, /*sharded=*/true, overlap,
            /*bucket_view=*/false, /*one_missing=*/!in_place, kBucket);
        for (int r = 0; r < 2; ++r) {
          SCOPED_TRACE(absl::StrCat("rank ", r, " params=", params, " overlap=",
                                    overlap, " in_place=", in_place));
          if (in_place) {
            // The chunks (half a bucket each at most) and the packing:
            // this rank's block kept too would take half a bucket more.
            EXPECT_GT(outcome.scratch_bytes[r], 0);
            EXPECT_LE(outcome.scratch_bytes[r], 2 * kBucket);
          } else {
            EXPECT_GE(outcome.scratch_bytes[r], kBucket);
            EXPECT_LE(outcome.scratch_bytes[r], 3 * kBucket);
          }
        }
      }
    }
  }
}

// Plain SGD whose first update waits (up to 2 s) for `ready()`, and
// records whether it came.
class WaitingSgd : public OptimizerKind {
 public:
  explicit WaitingSgd(std::function<bool()> ready) : ready_(std::move(ready)) {}

  const std::vector<HyperparameterSpec>& hyperparameters() const override {
    static const auto* specs =
        new std::vector<HyperparameterSpec>{{"lr", 0.1, "learning rate"}};
    return *specs;
  }
  absl::Status Validate(const Hyperparameters&) const override {
    return absl::OkStatus();
  }
  std::vector<StateBufferSpec> StateBuffers(
      const Hyperparameters&) const override {
    return {};
  }
  void Update(const UpdateArgs& a) const override {
    if (!waited_.exchange(true)) {
      const absl::Time deadline = absl::Now() + absl::Seconds(2);
      while (!ready_() && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(1));
      }
      came_ = ready_();
    }
    const float lr = static_cast<float>(a.hyperparameters->number("lr"));
    for (int64_t i = 0; i < a.count; ++i) a.param[i] -= lr * a.grad[i];
  }
  bool came() const { return came_; }

 private:
  const std::function<bool()> ready_;
  mutable std::atomic<bool> waited_{false};
  mutable std::atomic<bool> came_{false};
};

// With overlap, a rank steps the parameters of one bucket while the next
// bucket is reduced: rank 0's first update waits for the all-reduce of
// bucket 1 to begin, and it does. Without overlap that all-reduce comes
// only after the update, so the wait runs out.
TEST(ZeroOverlapTest, ARankStepsOneBucketWhileTheNextIsReduced) {
  for (bool overlap : {true, false}) {
    std::vector<bool> came(2);
    zero_testing::OnRanks(2, [&](Communicator& gloo) {
      const int r = gloo.rank();
      CountingCommunicator c(gloo);
      // The header, then bucket 0, then bucket 1: the third all-reduce.
      WaitingSgd kind([&] { return r != 0 || c.started(3); });
      // Four equal parameters owned by ranks 0, 1, 0, 1; buckets of two
      // (one per rank): {0, 1}, then {2, 3} (with overlap, the two buckets
      // in flight share bucket_bytes).
      std::vector<Tensor> params;
      ParamGroup group;
      group.hyperparameters = {{"lr", 0.1}};
      for (int i = 0; i < 4; ++i) {
        params.push_back(zero_testing::Initial(0, i, ParamSpec{{64}}));
      }
      for (Tensor& p : params) group.params.push_back(&p);
      ZeroOptions options;
      options.overlap = overlap;
      options.bucket_bytes = (overlap ? 4 : 2) * 64 * sizeof(float);
      auto zero =
          ZeroOptimizer::Create(&c, &kind, "waiting_sgd", {group}, options);
      ASSERT_TRUE(zero.ok()) << zero.status();
      ASSERT_EQ((*zero)->partition().owner[0], (std::vector<int>{0, 1, 0, 1}));
      c.StartCounting();
      std::vector<Tensor> grads;
      std::vector<const Tensor*> pointers;
      for (int i = 0; i < 4; ++i) {
        grads.push_back(zero_testing::Gradient(0, i, 0, r, ParamSpec{{64}}));
      }
      for (const Tensor& g : grads) pointers.push_back(&g);
      absl::Status status = (*zero)->Step({pointers});
      ASSERT_TRUE(status.ok()) << status;
      came[r] = kind.came();
    });
    EXPECT_EQ(came[0], overlap) << "overlap=" << overlap;
  }
}

// The parameters of `specs` (their initial values) after one ZeRO SGD step
// (lr 0.1) over `c` with this rank's gradients; `c` counts from the step.
absl::StatusOr<std::vector<Tensor>> OneSgdStep(
    CountingCommunicator& c, const std::vector<ParamSpec>& specs,
    const ZeroOptions& options) {
  auto registry = OptimizerRegistry::WithBuiltins();
  std::vector<Tensor> params, grads;
  for (size_t i = 0; i < specs.size(); ++i) {
    const int index = static_cast<int>(i);
    params.push_back(zero_testing::Initial(0, index, specs[i]));
    grads.push_back(zero_testing::Gradient(0, index, 0, c.rank(), specs[i]));
  }
  ParamGroup group;
  group.hyperparameters = {{"lr", 0.1}};
  for (Tensor& p : params) group.params.push_back(&p);
  std::vector<const Tensor*> pointers;
  for (const Tensor& g : grads) pointers.push_back(&g);
  auto zero = ZeroOptimizer::Create(&c, *registry->Find("sgd"), "sgd", {group},
                                    options);
  if (!zero.ok()) return zero.status();
  c.StartCounting();
  absl::Status status = (*zero)->Step({pointers});
  if (!status.ok()) return status;
  return params;
}

// What each mode sends for a model of 6 fp32 parameters of 256 values
// (6 KiB) in 2 KiB buckets: ZeRO-1 all-reduces the gradients and
// broadcasts the parameters; gradient-sharded reduce-scatters the
// gradients and all-gathers the parameters, with no broadcast at all.
TEST(ZeroCollectivesTest, EachModeSendsTheModelThroughItsCollectives) {
  // Parameters of 256 KiB: gradient-sharded, reduced where they are.
  constexpr int64_t kElements = 64 * 1024;
  constexpr size_t kModelBytes = 6 * kElements * sizeof(float);
  for (bool sharded : {false, true}) {
    for (bool overlap : {false, true}) {
      zero_testing::OnRanks(2, [&](Communicator& gloo) {
        CountingCommunicator c(gloo);
        ZeroOptions options;
        options.gradient_sharded = sharded;
        options.overlap = overlap;
        options.bucket_bytes = 512 << 10;
        absl::StatusOr<std::vector<Tensor>> stepped = OneSgdStep(
            c, std::vector<ParamSpec>(6, ParamSpec{{kElements}}), options);
        ASSERT_TRUE(stepped.ok()) << stepped.status();
        const std::string mode =
            absl::StrCat("sharded=", sharded, " overlap=", overlap);
        // Beyond the model: the header's all-reduce (one float per rank
        // for whether it refused the step, one for whether this rank is
        // active, one for whether its gradients are in host memory, one
        // per parameter) and the closing agreement's (one float per rank).
        const size_t header =
            (2 + 1 + 1 + 6) * sizeof(float) + 2 * sizeof(float);
        if (sharded) {
          EXPECT_EQ(c.all_reduce_bytes, header) << mode;
          // From the gradients where they are: none copied to a bucket.
          EXPECT_EQ(c.reduce_scatter_segments_bytes, kModelBytes) << mode;
          EXPECT_EQ(c.reduce_scatter_bytes, 0u) << mode;
          EXPECT_EQ(c.all_gather_bytes, kModelBytes) << mode;
          EXPECT_EQ(c.broadcast_bytes, 0u) << mode;
        } else {
          EXPECT_EQ(c.all_reduce_bytes, header + kModelBytes) << mode;
          EXPECT_EQ(c.reduce_scatter_bytes, 0u) << mode;
          EXPECT_EQ(c.reduce_scatter_segments_bytes, 0u) << mode;
          EXPECT_EQ(c.all_gather_bytes, 0u) << mode;
          EXPECT_EQ(c.broadcast_bytes, kModelBytes) << mode;
        }
      });
    }
  }
}

// A parameter of no elements would be in no piece of an in-place
// reduce-scatter, and so never count its step: with one present, the
// gradients are copied into buckets (where StepBucket steps it).
TEST(ZeroCollectivesTest, AnEmptyParameterKeepsTheGradientsCopied) {
  zero_testing::OnRanks(2, [&](Communicator& gloo) {
    CountingCommunicator c(gloo);
    ZeroOptions options;
    options.gradient_sharded = true;
    options.bucket_bytes = 1 << 20;
    // 512 KiB each: 439 KiB on average with the empty one, enough to be
    // reduced in place otherwise.
    std::vector<ParamSpec> specs(6, ParamSpec{{128 * 1024}});
    specs.push_back(ParamSpec{{0}});
    absl::StatusOr<std::vector<Tensor>> stepped = OneSgdStep(c, specs, options);
    ASSERT_TRUE(stepped.ok()) << stepped.status();
    EXPECT_EQ(c.reduce_scatter_segments_bytes, 0u);
    EXPECT_EQ(c.reduce_scatter_bytes, 6 * 128 * 1024 * sizeof(float));
  });
}

// Gradient-sharded with small parameters (1 KiB each), the gradients are
// copied into buckets and reduce-scattered there: one message a bucket,
// not one a parameter.
TEST(ZeroCollectivesTest, SmallGradientsAreCopiedIntoBuckets) {
  zero_testing::OnRanks(2, [&](Communicator& gloo) {
    CountingCommunicator c(gloo);
    ZeroOptions options;
    options.gradient_sharded = true;
    options.bucket_bytes = 2048;
    absl::StatusOr<std::vector<Tensor>> stepped =
        OneSgdStep(c, std::vector<ParamSpec>(6, ParamSpec{{256}}), options);
    ASSERT_TRUE(stepped.ok()) << stepped.status();
    EXPECT_EQ(c.reduce_scatter_bytes, 6 * 256 * sizeof(float));
    EXPECT_EQ(c.reduce_scatter_segments_bytes, 0u);
  });
}

// Torch's per-parameter broadcast (no bucket view) for a model of many
// small tensors: 200 of 1 KiB, and two of 256 KiB. The small ones reach
// every rank in one packed broadcast per owner, not one each (which would
// cost 200 collectives' latency); the large ones go alone, from their own
// memory. Every rank ends with the same parameters, all of them stepped.
TEST(ZeroCollectivesTest, SmallParametersArePackedInThePerParameterMode) {
  constexpr int kSmall = 200;
  const ParamSpec small{{256}};
  const ParamSpec large{{64 * 1024}};
  std::vector<ParamSpec> specs(kSmall, small);
  specs.resize(kSmall + 2, large);
  std::vector<std::vector<std::vector<float>>> after(2);
  std::vector<int> broadcasts(2);
  zero_testing::OnRanks(2, [&](Communicator& gloo) {
    const int r = gloo.rank();
    CountingCommunicator c(gloo);
    // Per-parameter broadcast, 25 MiB buckets.
    absl::StatusOr<std::vector<Tensor>> stepped =
        OneSgdStep(c, specs, ZeroOptions());
    ASSERT_TRUE(stepped.ok()) << stepped.status();
    broadcasts[r] = c.broadcasts;
    for (const Tensor& p : *stepped) {
      after[r].push_back(zero_testing::ToFloats(p));
    }
  });
  // One packed bucket per owner, and the two large ones.
  EXPECT_EQ(broadcasts[0], 2 + 2);
  EXPECT_EQ(broadcasts[1], 2 + 2);
  ASSERT_EQ(after[0].size(), after[1].size());
  for (size_t i = 0; i < after[0].size(); ++i) {
    EXPECT_EQ(after[0][i], after[1][i]) << i;
    EXPECT_NE(after[0][i], zero_testing::ToFloats(zero_testing::Initial(
                               0, static_cast<int>(i), specs[i])))
        << i << " was not stepped";
  }
}

// A rank whose own part of a step fails (here, a gradient it cannot read:
// on a device that does not exist) still takes part in every collective,
// and every rank learns of it: the others do not wait out the timeout, nor
// return OK with averages that lack that rank's gradients. Every rank's
// model changed, so every rank refuses further steps until recovered.
TEST(ZeroLocalFailureTest, EveryRankReportsARankThatFailedOnItsOwn) {
  for (bool sharded : {false, true}) {
    for (bool overlap : {false, true}) {
      const std::string mode =
          absl::StrCat("sharded=", sharded, " overlap=", overlap);
      std::vector<absl::Status> results(3);
      std::vector<absl::Status> next(3);
      const absl::Time start = absl::Now();
      zero_testing::OnRanks(3, [&](Communicator& communicator) {
        const int r = communicator.rank();
        auto registry = OptimizerRegistry::WithBuiltins();
        std::vector<Tensor> params, grads;
        ParamGroup group;
        group.hyperparameters = {{"lr", 0.1}};
        for (int i = 0; i < 6; ++i) {
          params.push_back(zero_testing::Initial(0, i, ParamSpec{{256}}));
          grads.push_back(zero_testing::Gradient(0, i, 0, r, ParamSpec{{256}}));
        }
        for (Tensor& p : params) group.params.push_back(&p);
        std::vector<const Tensor*> pointers;
        for (const Tensor& g : grads) pointers.push_back(&g);
        // Rank 1's gradient of parameter 3 claims a device that is not
        // there: copying it to the bucket fails on that rank alone.
        Tensor unreadable = Tensor::Borrow(grads[3].data(), DType::kFloat32,
                                           {256}, Device::Cuda(77));
        if (r == 1) pointers[3] = &unreadable;
        ZeroOptions options;
        options.gradient_sharded = sharded;
        options.overlap = overlap;
        options.bucket_bytes = 2048;  // Several buckets.
        auto zero = ZeroOptimizer::Create(&communicator, *registry->Find("sgd"),
                                          "sgd", {group}, options);
        ASSERT_TRUE(zero.ok()) << zero.status();
        results[r] = (*zero)->Step({pointers});
        next[r] = (*zero)->Step({pointers});
      });
      EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << mode;
      EXPECT_FALSE(results[1].ok()) << mode;
      for (int r : {0, 2}) {
        EXPECT_EQ(results[r].code(), absl::StatusCode::kFailedPrecondition)
            << mode << " rank " << r << ": " << results[r];
        EXPECT_THAT(results[r].message(), ::testing::HasSubstr("rank 1"))
            << mode;
      }
      for (int r = 0; r < 3; ++r) {
        EXPECT_EQ(next[r].code(), absl::StatusCode::kFailedPrecondition)
            << mode << " rank " << r << ": " << next[r];
        EXPECT_THAT(next[r].message(), ::testing::HasSubstr("half-way"))
            << mode << " rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace distopt
