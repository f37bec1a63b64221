#include "server/daemon/flag_files.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace distopt {

absl::StatusOr<std::string> ReadFlagFile(const std::string& path,
                                         absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", path, ": cannot read it"));
  }
  if (contents.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "=", path, ": missing or empty; expected a readable file"));
  }
  return contents.str();
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& path,
                                           absl::string_view flag,
                                           size_t min_bytes) {
  absl::StatusOr<std::string> contents = ReadFlagFile(path, flag);
  if (!contents.ok()) return contents.status();
  std::string secret(absl::StripAsciiWhitespace(*contents));
  if (secret.size() < min_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "=", path, ": holds ", secret.size(),
        " bytes besides whitespace; expected at least ", min_bytes));
  }
  return secret;
}

}  // namespace distopt
