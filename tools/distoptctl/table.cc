#include "tools/distoptctl/table.h"

#include <algorithm>

namespace distopt {
namespace distoptctl {

void Table::AddRow(std::vector<std::string> cells) {
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (row.size() > widths.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  std::string text;
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i > 0) line.append(2, ' ');
      line.append(row[i]);
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size(), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    text.append(line);
    text.push_back('\n');
  }
  return text;
}

}  // namespace distoptctl
}  // namespace distopt
