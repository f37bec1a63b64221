// Text as a JSON string: the escapes JSON requires (quote, backslash,
// control characters as \n, \t or \u00XX) and bytes that are not UTF-8
// (overlong forms and surrogates included) as U+FFFD, so that whatever a
// client or a daemon put in a name or a message, the document stays valid.
// Shared by the daemon's JSON logs and distoptctl's --json output.
#ifndef DISTOPT_COMMON_JSON_STRING_H_
#define DISTOPT_COMMON_JSON_STRING_H_

#include <string>

#include "absl/strings/string_view.h"

namespace distopt {

// Appends `text` escaped, without the surrounding quotes.
void AppendJsonEscaped(absl::string_view text, std::string* out);
// Appends `text` escaped and in double quotes.
void AppendJsonString(absl::string_view text, std::string* out);

}  // namespace distopt

#endif  // DISTOPT_COMMON_JSON_STRING_H_
