// Comparing secrets (bearer tokens, the group secret) without an early
// exit, so the time a refusal takes does not reveal how much matched.
#ifndef DISTOPT_COMMON_CONSTANT_TIME_H_
#define DISTOPT_COMMON_CONSTANT_TIME_H_

#include "absl/strings/string_view.h"

namespace distopt {

inline bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference |= a[i] ^ b[i];
  return difference == 0;
}

}  // namespace distopt

#endif  // DISTOPT_COMMON_CONSTANT_TIME_H_
