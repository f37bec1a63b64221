#include "common/log.h"

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace log {
namespace {

const absl::Time kTime = absl::FromUnixMillis(1764567600123);  // 2025-12-01

TEST(LogTest, TextIsLogfmtWithQuotesWhereNeeded) {
  const std::string line =
      Render(Format::kText, kTime, Level::kWarning, "call refused",
             {{"code", "INVALID_ARGUMENT"},
              {"error", "shape: expected [2, 3], got \"[2]\"\nnext"},
              {"bytes", int64_t{42}},
              {"empty", ""}});
  EXPECT_EQ(line,
            "time=2025-12-01T05:40:00.123Z level=warning msg=\"call refused\" "
            "code=INVALID_ARGUMENT error=\"shape: expected [2, 3], got "
            "\\\"[2]\\\"\\nnext\" bytes=42 empty=\"\"\n");
}

TEST(LogTest, JsonEscapesControlCharactersAndBytesThatAreNotUtf8) {
  const std::string line =
      Render(Format::kJson, kTime, Level::kError, "a \"b\"\\",
             {{"name", std::string("w\x01\xff\xc3\xa9\n", 6)},
              {"ratio", 0.5},
              {"nan", std::nan("")},
              {"key with space", "v"}});
  EXPECT_EQ(
      line,
      "{\"time\":\"2025-12-01T05:40:00.123Z\",\"level\":\"error\","
      "\"msg\":\"a \\\"b\\\"\\\\\",\"name\":\"w\\u0001\\ufffd\xc3\xa9\\n\","
      "\"ratio\":0.5,\"nan\":\"nan\",\"key_with_space\":\"v\"}\n");
}

TEST(LogTest, OverlongAndSurrogateSequencesAreNotUtf8) {
  const std::string line = Render(Format::kJson, kTime, Level::kInfo,
                                  std::string("\xc0\xaf\xed\xa0\x80"), {});
  EXPECT_THAT(line, ::testing::HasSubstr(
                        "\"msg\":\"\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\""));
}

TEST(LogTest, ParseFormatNamesTheFlag) {
  EXPECT_EQ(*ParseFormat("json"), Format::kJson);
  EXPECT_EQ(*ParseFormat("text"), Format::kText);
  absl::StatusOr<Format> bad = ParseFormat("xml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("--log_format=xml: expected text or json"));
}

TEST(LogTest, RateLimiterLetsTheBurstThroughThenTheRateAndCountsTheRest) {
  RateLimiter limiter(/*per_second=*/2, /*burst=*/3);
  int64_t dropped = -1;
  int allowed = 0;
  for (int i = 0; i < 10; ++i) allowed += limiter.Allow(kTime, &dropped);
  EXPECT_EQ(allowed, 3);
  // Half a second later: one more token; it reports the 7 dropped.
  EXPECT_TRUE(limiter.Allow(kTime + absl::Milliseconds(500), &dropped));
  EXPECT_EQ(dropped, 7);
  EXPECT_FALSE(limiter.Allow(kTime + absl::Milliseconds(500), &dropped));
  // Long after: never more than the burst.
  allowed = 0;
  for (int i = 0; i < 10; ++i) {
    allowed += limiter.Allow(kTime + absl::Hours(1), &dropped);
  }
  EXPECT_EQ(allowed, 3);
}

}  // namespace
}  // namespace log
}  // namespace distopt
