// The averagers' step rules against torch's own averagers: golden
// schedules from tools/golden/generate_averager_golden.py (Debian's
// python3-torch, 4 gloo ranks) give, per step, the size of the group torch
// averaged in; and torch's validation.
#include "server/localsgd/model_averager.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

struct GoldenSchedule {
  std::string line;
  AveragerSpec spec;
  std::vector<int> sizes;  // Per step; 0 for none.
};

std::vector<GoldenSchedule> LoadGolden() {
  std::ifstream file("server/localsgd/testdata/averager_golden.txt");
  std::vector<GoldenSchedule> cases;
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    GoldenSchedule golden;
    golden.line = line;
    std::string kind, periods;
    in >> kind >> golden.spec.warmup_steps >> periods;
    golden.spec.kind = kind == "periodic" ? AveragerSpec::Kind::kPeriodic
                                          : AveragerSpec::Kind::kHierarchical;
    for (absl::string_view entry : absl::StrSplit(periods, ',')) {
      std::pair<absl::string_view, absl::string_view> parts =
          absl::StrSplit(entry, ':');
      int64_t period = 0;
      int size = 0;
      EXPECT_TRUE(absl::SimpleAtoi(parts.first, &period));
      EXPECT_TRUE(absl::SimpleAtoi(parts.second, &size));
      golden.spec.periods.emplace_back(period, size);
    }
    int size = 0;
    while (in >> size) golden.sizes.push_back(size);
    cases.push_back(std::move(golden));
  }
  return cases;
}

TEST(ModelAveragerTest, SchedulesEqualTorchsAveragers) {
  const std::vector<GoldenSchedule> cases = LoadGolden();
  ASSERT_GE(cases.size(), 12u);
  for (const GoldenSchedule& golden : cases) {
    std::vector<std::string> warnings;
    absl::StatusOr<ModelAverager> averager =
        ModelAverager::Create(golden.spec, 4, &warnings);
    ASSERT_TRUE(averager.ok()) << golden.line << ": " << averager.status();
    for (size_t step = 0; step < golden.sizes.size(); ++step) {
      EXPECT_EQ(averager->GroupSizeAt(averager->step()).value_or(0),
                golden.sizes[step])
          << golden.line << " at step " << step;
      // The next averaging, as reported to users, is the first step at or
      // after this one where torch averaged.
      for (size_t later = step; later < golden.sizes.size(); ++later) {
        if (golden.sizes[later] == 0) continue;
        const Averaging next = averager->NextAveraging(step);
        EXPECT_EQ(next.step, static_cast<int64_t>(later)) << golden.line;
        EXPECT_EQ(next.group_size, golden.sizes[later]) << golden.line;
        break;
      }
      averager->Advance();
    }
  }
}

TEST(ModelAveragerTest, TheNextAveragingIsComputedEvenForHugePeriods) {
  std::vector<std::string> warnings;
  AveragerSpec spec;
  spec.periods = {{int64_t{1} << 50, 4}};
  spec.warmup_steps = 7;
  ModelAverager periodic = *ModelAverager::Create(spec, 4, &warnings);
  EXPECT_EQ(periodic.NextAveraging(0).step, 7);
  EXPECT_EQ(periodic.NextAveraging(8).step, 7 + (int64_t{1} << 50));
  spec.kind = AveragerSpec::Kind::kHierarchical;
  spec.periods = {{int64_t{1} << 40, 2}, {int64_t{1} << 50, 4}};
  ModelAverager hierarchical = *ModelAverager::Create(spec, 4, &warnings);
  const Averaging next = hierarchical.NextAveraging(8);
  EXPECT_EQ(next.step, int64_t{1} << 40);
  EXPECT_EQ(next.group_size, 2);
}

TEST(ModelAveragerTest, RefusesWhatTorchRefuses) {
  std::vector<std::string> warnings;
  auto make = [&](AveragerSpec::Kind kind,
                  std::vector<std::pair<int64_t, int>> periods,
                  int64_t warmup) {
    AveragerSpec spec;
    spec.kind = kind;
    spec.periods = std::move(periods);
    spec.warmup_steps = warmup;
    return ModelAverager::Create(spec, 4, &warnings).status();
  };
  const auto periodic = AveragerSpec::Kind::kPeriodic;
  const auto hierarchical = AveragerSpec::Kind::kHierarchical;
  EXPECT_THAT(make(periodic, {{0, 4}}, 0).message(), HasSubstr("period 0"));
  EXPECT_THAT(make(periodic, {{2, 4}}, -1).message(),
              HasSubstr("warmup_steps: -1"));
  EXPECT_THAT(make(hierarchical, {}, 0).message(),
              HasSubstr("period_group_sizes: empty"));
  EXPECT_THAT(make(hierarchical, {{2, 4}, {4, 2}}, 0).message(),
              HasSubstr("for the largest period 4; expected the world size"));
  EXPECT_THAT(make(hierarchical, {{2, 3}, {4, 4}}, 0).message(),
              HasSubstr("group size 3 for period 2; expected a divisor"));
  EXPECT_THAT(make(hierarchical, {{-1, 2}, {4, 4}}, 0).message(),
              HasSubstr("period -1"));
  for (const absl::Status& refused :
       {make(periodic, {{0, 4}}, 0), make(hierarchical, {}, 0)}) {
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_THAT(make(periodic, {{int64_t{1} << 60, 4}}, 0).message(),
              HasSubstr("expected at most"));
  // Period 1 is allowed, with torch's warning.
  warnings.clear();
  EXPECT_TRUE(make(periodic, {{1, 4}}, 0).ok());
  EXPECT_EQ(warnings.size(), 1u);
}

}  // namespace
}  // namespace distopt
