#include "server/services/paging.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/quoted.h"

namespace distopt {

absl::StatusOr<PageRequest> ParsePageRequest(int page_size,
                                             const std::string& page_token) {
  PageRequest page;
  if (page_size < 0 || page_size > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: ", page_size, "; expected 1 to ", kMaxPageSize,
                     ", or 0 for the default"));
  }
  if (page_size > 0) page.limit = static_cast<size_t>(page_size);
  if (!page_token.empty() && !absl::SimpleAtoi(page_token, &page.after_id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_token: ", Quoted(page_token),
        " is not a token; expected the next_page_token of an earlier "
        "response"));
  }
  return page;
}

std::string NextPageToken(std::optional<uint64_t> next_after_id) {
  return next_after_id.has_value() ? absl::StrCat(*next_after_id) : "";
}

}  // namespace distopt
