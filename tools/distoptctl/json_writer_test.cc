#include "tools/distoptctl/json_writer.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace distopt {
namespace distoptctl {
namespace {

TEST(JsonWriterTest, PutsCommasBetweenElementsAtEveryDepth) {
  JsonWriter json;
  json.BeginObject()
      .Field("a", 1)
      .Key("b")
      .BeginArray()
      .Value(true)
      .BeginObject()
      .EndObject()
      .BeginArray()
      .EndArray()
      .Null()
      .EndArray()
      .Field("c", "x")
      .EndObject();
  EXPECT_EQ(json.text(), R"({"a":1,"b":[true,{},[],null],"c":"x"})");
}

TEST(JsonWriterTest, EscapesStringsAndKeys) {
  JsonWriter json;
  json.BeginObject()
      .Field("k\"ey", std::string("a\\b\n\x01\xff", 6))
      .EndObject();
  EXPECT_EQ(json.text(), R"({"k\"ey":"a\\b\n\u0001\ufffd"})");
}

TEST(JsonWriterTest, NumbersKeepTheirRangeAndNonFiniteOnesAreNull) {
  JsonWriter json;
  json.BeginArray()
      .Value(std::numeric_limits<uint64_t>::max())
      .Value(std::numeric_limits<int64_t>::min())
      .Value(0.25)
      .Value(std::nan(""))
      .Value(std::optional<double>())
      .Value(std::optional<double>(1.5))
      .EndArray();
  EXPECT_EQ(json.text(),
            "[18446744073709551615,-9223372036854775808,0.25,null,null,1.5]");
}

}  // namespace
}  // namespace distoptctl
}  // namespace distopt
