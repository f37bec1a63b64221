// Files that flags name (certificates, keys, tokens, the group secret).
#ifndef DISTOPT_SERVER_DAEMON_FLAG_FILES_H_
#define DISTOPT_SERVER_DAEMON_FLAG_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distopt {

// The file's bytes. INVALID_ARGUMENT naming `flag` when it cannot be read
// or is empty.
absl::StatusOr<std::string> ReadFlagFile(const std::string& path,
                                         absl::string_view flag);

// The file's text without surrounding whitespace (a token, a secret):
// INVALID_ARGUMENT naming `flag` when it holds fewer than `min_bytes`. The
// text itself never appears in a message.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path,
                                           absl::string_view flag,
                                           size_t min_bytes);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DAEMON_FLAG_FILES_H_
