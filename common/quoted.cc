#include "common/quoted.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace distopt {

std::string Quoted(absl::string_view text) {
  if (text.size() <= kMaxQuotedBytes) {
    return absl::StrCat("\"", absl::CHexEscape(text), "\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(text.substr(0, kMaxQuotedBytes)),
                      "\"... (", text.size(), " bytes)");
}

}  // namespace distopt
