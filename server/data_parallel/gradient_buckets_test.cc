#include "server/data_parallel/gradient_buckets.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/optim/registry.h"

namespace distopt {
namespace {

// One group of fp32 parameters of `sizes` elements, each owned by
// owners[i], all with a gradient.
struct Model {
  std::vector<Tensor> tensors;
  std::vector<ParamGroup> groups;
  std::vector<std::vector<int>> owner;
  Presence present;

  Model(const std::vector<int64_t>& sizes, const std::vector<int>& owners) {
    for (int64_t size : sizes) {
      tensors.push_back(*Tensor::AllocateHost(DType::kFloat32, {size}));
    }
    groups.emplace_back();
    for (Tensor& t : tensors) groups[0].params.push_back(&t);
    owner = {owners};
    present = {std::vector<bool>(sizes.size(), true)};
  }
};

std::vector<std::vector<int>> Members(const std::vector<GradientBucket>& plan) {
  std::vector<std::vector<int>> members;
  for (const GradientBucket& bucket : plan) {
    members.emplace_back();
    for (const BucketEntry& entry : bucket.entries) {
      members.back().push_back(entry.index);
    }
  }
  return members;
}

TEST(PlanGradientBucketsTest, SmallParametersFillBucketsEvenlyByOwner) {
  // Eight parameters of 10, owned 0, 1, 0, 1, ...; buckets of 40: each
  // takes 20 from each owner, laid out owner 0's block first.
  Model m(std::vector<int64_t>(8, 10), {0, 1, 0, 1, 0, 1, 0, 1});
  const auto plan = PlanGradientBuckets(m.groups, m.owner, 2, m.present, 40);
  EXPECT_THAT(Members(plan),
              ::testing::ElementsAre(::testing::ElementsAre(0, 2, 1, 3),
                                     ::testing::ElementsAre(4, 6, 5, 7)));
  for (const GradientBucket& bucket : plan) {
    EXPECT_THAT(bucket.blocks, ::testing::ElementsAre(20, 20));
    EXPECT_EQ(bucket.size, 40);
    EXPECT_EQ(bucket.entries[2].offset, 20);
  }
  EXPECT_EQ(LargestBucket(plan), 40);
}

// Parameters larger than an owner's share (50 of 100) go one per bucket:
// a bucket never exceeds its size for the sake of balance.
TEST(PlanGradientBucketsTest, ParametersLargerThanAShareGoOnePerBucket) {
  Model m(std::vector<int64_t>(4, 64), {0, 1, 0, 1});
  const auto plan = PlanGradientBuckets(m.groups, m.owner, 2, m.present, 100);
  EXPECT_THAT(Members(plan), ::testing::ElementsAre(::testing::ElementsAre(0),
                                                    ::testing::ElementsAre(1),
                                                    ::testing::ElementsAre(2),
                                                    ::testing::ElementsAre(3)));
  EXPECT_EQ(LargestBucket(plan), 64);
}

TEST(PlanGradientBucketsTest, AParameterLargerThanTheBucketGoesAlone) {
  Model m({500, 10, 10}, {0, 1, 1});
  const auto plan = PlanGradientBuckets(m.groups, m.owner, 2, m.present, 100);
  EXPECT_THAT(Members(plan),
              ::testing::ElementsAre(::testing::ElementsAre(0),
                                     ::testing::ElementsAre(1, 2)));
  EXPECT_EQ(LargestBucket(plan), 500);
}

// (index, begin, count) of each bucket's entries.
std::vector<std::vector<std::tuple<int, int64_t, int64_t>>> Slices(
    const std::vector<GradientBucket>& plan) {
  std::vector<std::vector<std::tuple<int, int64_t, int64_t>>> slices;
  for (const GradientBucket& bucket : plan) {
    slices.emplace_back();
    for (const BucketEntry& entry : bucket.entries) {
      slices.back().emplace_back(entry.index, entry.begin, entry.count);
    }
  }
  return slices;
}

using ::testing::ElementsAre;
using ::testing::FieldsAre;

// Sliced, parameters larger than a share (64 of 50) are cut so that every
// bucket takes as much from each owner while both have gradients left. The
// gradients' spans are block by block, the slices' own elements;
// LargestBlock is what a reduce-scatter's ring keeps of a block.
TEST(PlanGradientBucketsTest, SlicedLargeParametersFillEveryOwnersShare) {
  Model m(std::vector<int64_t>(4, 64), {0, 1, 0, 1});
  const auto plan = PlanGradientBuckets(m.groups, m.owner, 2, m.present, 100,
                                        Slicing::kSliced);
  EXPECT_THAT(
      Slices(plan),
      ElementsAre(ElementsAre(FieldsAre(0, 0, 50), FieldsAre(1, 0, 50)),
                  ElementsAre(FieldsAre(0, 50, 14), FieldsAre(2, 0, 36),
                              FieldsAre(1, 50, 14), FieldsAre(3, 0, 36)),
                  ElementsAre(FieldsAre(2, 36, 28), FieldsAre(3, 36, 28))));
  EXPECT_THAT(plan[1].blocks, ElementsAre(50, 50));
  EXPECT_THAT(plan[2].blocks, ElementsAre(28, 28));
  EXPECT_EQ(plan[1].entries[1].offset, 14);
  EXPECT_EQ(plan[1].entries[1].total, 64);
  EXPECT_EQ(LargestBucket(plan), 100);
  EXPECT_EQ(LargestBlock(plan, 1), 50);
  EXPECT_EQ(BlockBegin(plan[1], 1), 50);
  GroupGradientPointers grads = {{}};
  for (const Tensor& t : m.tensors) grads[0].push_back(&t);
  const auto spans = GradientSpans(plan[1], grads);
  ASSERT_EQ(spans.size(), 2u);
  ASSERT_EQ(spans[1].size(), 2u);
  EXPECT_EQ(spans[1][0].data(),
            static_cast<const float*>(m.tensors[1].data()) + 50);
  EXPECT_EQ(spans[1][0].size(), 14u);
  EXPECT_EQ(spans[1][1].data(), static_cast<const float*>(m.tensors[3].data()));
  EXPECT_EQ(spans[1][1].size(), 36u);
}

// Buckets keep their size when no parameter is larger than a share, and a
// parameter no larger than a share is never cut: it waits for the next
// bucket rather than be split at the end of this one.
TEST(PlanGradientBucketsTest, SlicedPlansKeepSmallParametersWhole) {
  Model m(std::vector<int64_t>(4, 30), {0, 1, 0, 1});
  const auto plan = PlanGradientBuckets(m.groups, m.owner, 2, m.present, 100,
                                        Slicing::kSliced);
  EXPECT_THAT(
      Slices(plan),
      ElementsAre(ElementsAre(FieldsAre(0, 0, 30), FieldsAre(1, 0, 30)),
                  ElementsAre(FieldsAre(2, 0, 30), FieldsAre(3, 0, 30))));
}

// No parameter larger than a share (75 of 150): nothing is cut.
TEST(PlanGradientBucketsTest, SlicedPlansCutNoParameterThatFits) {
  Model m({40, 40, 20, 20, 20, 20}, {0, 1, 0, 1, 0, 1});
  const auto plan = PlanGradientBuckets(m.groups, m.owner, 2, m.present, 150,
                                        Slicing::kSliced);
  EXPECT_THAT(Members(plan),
              ElementsAre(ElementsAre(0, 2, 1, 3), ElementsAre(4, 5)));
  EXPECT_EQ(LargestBucket(plan), 120);
}

// While both owners have gradients left each has half the bucket (50 of
// 100); once one has none, the other takes all of it.
TEST(PlanGradientBucketsTest, SlicedPlansGiveTheRoomOfDoneOwnersToTheRest) {
  Model m({300, 10}, {0, 1});
  const auto plan = PlanGradientBuckets(m.groups, m.owner, 2, m.present, 100,
                                        Slicing::kSliced);
  EXPECT_THAT(Slices(plan),
              ElementsAre(ElementsAre(FieldsAre(0, 0, 50), FieldsAre(1, 0, 10)),
                          ElementsAre(FieldsAre(0, 50, 100)),
                          ElementsAre(FieldsAre(0, 150, 100)),
                          ElementsAre(FieldsAre(0, 250, 50))));
  EXPECT_EQ(LargestBucket(plan), 100);
}

// A cap on the blocks holds once one owner has the buckets to itself: its
// slices stay within 50 of 100.
TEST(PlanGradientBucketsTest, SlicedPlansKeepBlocksWithinTheirCap) {
  Model m({300, 10}, {0, 1});
  const auto plan = PlanGradientBuckets(m.groups, m.owner, 2, m.present, 100,
                                        Slicing::kSliced, 50);
  ASSERT_EQ(plan.size(), 6u);
  EXPECT_THAT(Slices(plan)[0],
              ElementsAre(FieldsAre(0, 0, 50), FieldsAre(1, 0, 10)));
  for (size_t k = 1; k < plan.size(); ++k) {
    EXPECT_THAT(Slices(plan)[k],
                ElementsAre(FieldsAre(0, 50 * static_cast<int64_t>(k), 50)))
        << k;
  }
  EXPECT_EQ(LargestBlock(plan, 0), 50);
}

TEST(PlanGradientBucketsTest, MissingGradientsAreLeftOut) {
  Model m(std::vector<int64_t>(4, 10), {0, 1, 0, 1});
  m.present[0][1] = false;
  const auto plan = PlanGradientBuckets(m.groups, m.owner, 2, m.present, 1000);
  EXPECT_THAT(Members(plan),
              ::testing::ElementsAre(::testing::ElementsAre(0, 2, 3)));
  EXPECT_THAT(plan[0].blocks, ::testing::ElementsAre(20, 10));
}

// Rank 0's side of a step: an Adam over the parameters it owns.
struct OwnerSide {
  std::unique_ptr<FunctionalOptimizer> optimizer;
  std::vector<GroupStepper> steppers{1};

  OwnerSide(Model& m, int rank) {
    static auto* registry = OptimizerRegistry::WithBuiltins().release();
    std::vector<ParameterLayout> layouts;
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      if (m.owner[0][i] != rank) {
        steppers[0].position.push_back(-1);
        continue;
      }
      steppers[0].position.push_back(static_cast<int>(layouts.size()));
      steppers[0].params.push_back(&m.tensors[i]);
      layouts.push_back({DType::kFloat32, m.tensors[i].shape()});
    }
    optimizer = *FunctionalOptimizer::Create(*registry->Find("adam"),
                                             {{"lr", 0.01}}, layouts);
    steppers[0].optimizer = optimizer.get();
  }
};

// Stepping a rank's block piece by piece, the pieces cut anywhere (several
// parameters in one, a parameter across several, slices of parameters cut
// across buckets), gives bit for bit what stepping each bucket at once
// gives, over two steps; the other owners' parameters stay as they were.
TEST(StepReducedPieceTest, PiecesCutAnywhereStepAsTheWholeBucket) {
  const std::vector<int64_t> sizes = {7, 300, 5, 120, 40, 9};
  const std::vector<int> owners = {0, 0, 1, 0, 1, 0};
  Model whole(sizes, owners), pieces(sizes, owners);
  for (Model* m : {&whole, &pieces}) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      float* p = static_cast<float*>(m->tensors[i].data());
      for (int64_t e = 0; e < sizes[i]; ++e) p[e] = 0.01f * (e % 17) - 0.05f;
    }
  }
  const auto plan = PlanGradientBuckets(
      whole.groups, whole.owner, 2, whole.present, 160, Slicing::kSliced, 80);
  ASSERT_GT(plan.size(), 2u);
  OwnerSide stepped_whole(whole, 0), stepped_in_pieces(pieces, 0);
  DeviceBuffer narrowed(*GetBackend(Device::Cpu()));
  std::atomic<bool> changing{false};
  constexpr int64_t kPiece = 13;
  for (int step = 0; step < 2; ++step) {
    for (const GradientBucket& bucket : plan) {
      std::vector<float> averages(bucket.size);
      for (size_t e = 0; e < averages.size(); ++e) {
        averages[e] = std::sin(0.3f * static_cast<float>(e) + step);
      }
      ASSERT_TRUE(StepBucket(bucket, whole.groups, absl::MakeSpan(averages),
                             stepped_whole.steppers, &narrowed, &changing)
                      .ok());
      const int64_t begin = BlockBegin(bucket, 0);
      const int64_t end = begin + static_cast<int64_t>(bucket.blocks[0]);
      size_t next_entry = 0;
      for (int64_t at = begin; at < end; at += kPiece) {
        const int64_t length = std::min(kPiece, end - at);
        ASSERT_TRUE(
            StepReducedPiece(bucket, pieces.groups, at,
                             absl::MakeConstSpan(averages.data() + at, length),
                             stepped_in_pieces.steppers, &next_entry, &changing)
                .ok())
            << "step " << step << " piece at " << at;
      }
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(std::memcmp(whole.tensors[i].data(), pieces.tensors[i].data(),
                          whole.tensors[i].byte_size()),
              0)
        << "parameter " << i;
  }
  const float* untouched = static_cast<const float*>(pieces.tensors[2].data());
  EXPECT_EQ(untouched[1], 0.01f * 1 - 0.05f);
  const float* owned = static_cast<const float*>(pieces.tensors[1].data());
  EXPECT_NE(owned[1], 0.01f * 1 - 0.05f);
}

}  // namespace
}  // namespace distopt
