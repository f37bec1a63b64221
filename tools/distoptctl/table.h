// Table: rows of text printed in aligned columns, for distoptctl's human
// output. Cells are left-aligned, two spaces apart, with no trailing
// spaces; a row shorter than the others leaves its last cells empty. Not
// thread-safe.
#ifndef DISTOPT_TOOLS_DISTOPTCTL_TABLE_H_
#define DISTOPT_TOOLS_DISTOPTCTL_TABLE_H_

#include <string>
#include <vector>

namespace distopt {
namespace distoptctl {

class Table {
 public:
  // The first row, usually the column names; nothing makes it special but
  // its place.
  void AddRow(std::vector<std::string> cells);
  // The rows, a line each.
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace distoptctl
}  // namespace distopt

#endif  // DISTOPT_TOOLS_DISTOPTCTL_TABLE_H_
