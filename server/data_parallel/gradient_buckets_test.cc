#include "server/data_parallel/gradient_buckets.h"

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
