#include "tools/distoptctl/arguments.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(bool, test_json, false, "a bool flag");
ABSL_FLAG(absl::Duration, test_interval, absl::Seconds(1), "a duration flag");
ABSL_FLAG(std::string, test_prefix, "", "a string flag");
ABSL_FLAG(int, test_unlisted, 0, "a flag the parser is not given");

namespace distopt {
namespace distoptctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::string_view kFlags[] = {"test_json", "test_interval",
                                        "test_prefix"};

absl::StatusOr<Arguments> Parse(std::vector<const char*> argv) {
  argv.insert(argv.begin(), "distoptctl");
  return ParseArguments(static_cast<int>(argv.size()), argv.data(), kFlags);
}

class ArgumentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetFlag(&FLAGS_test_json, false);
    absl::SetFlag(&FLAGS_test_interval, absl::Seconds(1));
    absl::SetFlag(&FLAGS_test_prefix, "");
  }
};

TEST_F(ArgumentsTest, FlagsGoAnywhereAmongTheOperands) {
  absl::StatusOr<Arguments> arguments =
      Parse({"--test_json", "top", "a:1", "--test_interval=200ms", "b:2",
             "-test_prefix", "layer."});
  ASSERT_TRUE(arguments.ok()) << arguments.status();
  EXPECT_THAT(arguments->positional, ElementsAre("top", "a:1", "b:2"));
  EXPECT_TRUE(absl::GetFlag(FLAGS_test_json));
  EXPECT_EQ(absl::GetFlag(FLAGS_test_interval), absl::Milliseconds(200));
  EXPECT_EQ(absl::GetFlag(FLAGS_test_prefix), "layer.");
  EXPECT_THAT(arguments->flags_set,
              ElementsAre("test_interval", "test_json", "test_prefix"));
  EXPECT_FALSE(arguments->help);
}

TEST_F(ArgumentsTest, BoolFlagsTakeNoAndValues) {
  ASSERT_TRUE(Parse({"--test_json=true", "--notest_json"}).ok());
  EXPECT_FALSE(absl::GetFlag(FLAGS_test_json));
  ASSERT_TRUE(Parse({"--test_json=true"}).ok());
  EXPECT_TRUE(absl::GetFlag(FLAGS_test_json));
}

TEST_F(ArgumentsTest, EverythingAfterTheEndOfFlagsIsAnOperand) {
  absl::StatusOr<Arguments> arguments = Parse({"status", "--", "--test_json"});
  ASSERT_TRUE(arguments.ok());
  EXPECT_THAT(arguments->positional, ElementsAre("status", "--test_json"));
  EXPECT_FALSE(absl::GetFlag(FLAGS_test_json));
}

TEST_F(ArgumentsTest, MistakesAreErrorsNamingTheArgument) {
  EXPECT_THAT(Parse({"--nope"}).status().message(),
              HasSubstr("--nope: unknown flag"));
  // Defined in the program, but not one the parser takes.
  EXPECT_THAT(Parse({"--test_unlisted=1"}).status().message(),
              HasSubstr("unknown flag"));
  EXPECT_THAT(Parse({"--notest_prefix"}).status().message(),
              HasSubstr("unknown flag"));
  EXPECT_THAT(Parse({"status", "--test_prefix"}).status().message(),
              HasSubstr("--test_prefix: missing its value"));
  EXPECT_THAT(Parse({"--test_interval=soon"}).status().message(),
              HasSubstr("--test_interval=soon"));
  EXPECT_THAT(Parse({"--test_json=maybe"}).status().message(),
              HasSubstr("--test_json=maybe"));
}

TEST_F(ArgumentsTest, HelpIsNoticed) {
  EXPECT_TRUE(Parse({"status", "--help"})->help);
  EXPECT_TRUE(Parse({"-h"})->help);
}

}  // namespace
}  // namespace distoptctl
}  // namespace distopt
