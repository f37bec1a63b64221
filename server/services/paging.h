// Paged listings (ListParameters, ListContexts): page_size and page_token
// as requests carry them, and the token of the next page. A token is the id
// to continue after.
#ifndef DISTOPT_SERVER_SERVICES_PAGING_H_
#define DISTOPT_SERVER_SERVICES_PAGING_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace distopt {

// The most entries one page holds, and the size of a page that names none.
inline constexpr int kMaxPageSize = 1000;

struct PageRequest {
  size_t limit = kMaxPageSize;
  uint64_t after_id = 0;
};

// INVALID_ARGUMENT naming the field for a size outside 0 to kMaxPageSize or
// a token no page gave.
absl::StatusOr<PageRequest> ParsePageRequest(int page_size,
                                             const std::string& page_token);

// The next page's token: empty when there is none.
std::string NextPageToken(std::optional<uint64_t> next_after_id);

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_PAGING_H_
