// The partition equals torch's ZeroRedundancyOptimizer's on golden cases
// (tools/golden/generate_zero_partition_golden.py).
#include "server/zero/partition.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

struct GoldenPartition {
  std::string name;
  int world_size = 0;
  std::vector<std::vector<int64_t>> groups;
  std::vector<std::vector<std::vector<int>>> expected;  // [rank][group]
};

std::vector<GoldenPartition> ReadGolden() {
  std::ifstream file(std::string(std::getenv("TEST_SRCDIR")) +
                     "/distopt/server/zero/testdata/partition_golden.txt");
  EXPECT_TRUE(file.good());
  std::vector<GoldenPartition> cases;
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream in(line);
    std::string record;
    in >> record;
    if (record == "case") {
      cases.emplace_back();
      in >> cases.back().name >> cases.back().world_size;
      cases.back().expected.resize(cases.back().world_size);
    } else if (record == "group") {
      std::vector<int64_t> counts;
      int64_t count;
      while (in >> count) counts.push_back(count);
      cases.back().groups.push_back(counts);
    } else if (record == "rank") {
      int rank, group, index;
      in >> rank >> group;
      auto& slots = cases.back().expected[rank];
      if (static_cast<int>(slots.size()) <= group) slots.resize(group + 1);
      while (in >> index) slots[group].push_back(index);
    }
  }
  return cases;
}

TEST(ZeroPartitionTest, MatchesTorchOnGoldenCases) {
  const std::vector<GoldenPartition> cases = ReadGolden();
  ASSERT_GE(cases.size(), 8u);
  for (const GoldenPartition& golden : cases) {
    SCOPED_TRACE(golden.name);
    absl::StatusOr<ZeroPartition> partition =
        PartitionParameters(golden.groups, golden.world_size);
    ASSERT_TRUE(partition.ok()) << partition.status();
    for (int rank = 0; rank < golden.world_size; ++rank) {
      for (size_t g = 0; g < golden.groups.size(); ++g) {
        const std::vector<int> want = g < golden.expected[rank].size()
                                          ? golden.expected[rank][g]
                                          : std::vector<int>{};
        EXPECT_EQ(partition->parameters[rank][g], want)
            << "rank " << rank << " group " << g;
      }
    }
  }
}

TEST(ZeroPartitionTest, OwnersAndLoadsAgreeWithTheAssignment) {
  absl::StatusOr<ZeroPartition> partition =
      PartitionParameters({{10, 30, 20}, {25}}, 2);
  ASSERT_TRUE(partition.ok());
  EXPECT_THAT(partition->owner[0], ::testing::ElementsAre(1, 0, 1));
  // Group 1 starts from the carried loads 30 and 30: the tie goes to rank 0.
  EXPECT_THAT(partition->owner[1], ::testing::ElementsAre(0));
  EXPECT_THAT(partition->load, ::testing::ElementsAre(55, 30));
  EXPECT_EQ(PartitionParameters({{1}}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionParameters({{-1}}, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace distopt
