#include "tools/distoptctl/table.h"

#include "gtest/gtest.h"

namespace distopt {
namespace distoptctl {
namespace {

TEST(TableTest, AlignsColumnsWithoutTrailingSpaces) {
  Table table;
  table.AddRow({"ID", "NAME", "BYTES"});
  table.AddRow({"1", "layer.weight", "4.0 KiB"});
  table.AddRow({"12", "b", ""});
  table.AddRow({"3"});
  EXPECT_EQ(table.Render(),
            "ID  NAME          BYTES\n"
            "1   layer.weight  4.0 KiB\n"
            "12  b\n"
            "3\n");
}

}  // namespace
}  // namespace distoptctl
}  // namespace distopt
