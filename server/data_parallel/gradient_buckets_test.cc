#include "server/data_parallel/gradient_buckets.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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
// LargestBlock is the scratch for an owner's block.
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

}  // namespace
}  // namespace distopt
