// Libraries opened with dlopen() on first use rather than linked (cuBLAS,
// NCCL): a linked library is mapped into every process at start-up, and
// these are large. What the loaders of both share.
#ifndef DISTOPT_COMMON_DYNAMIC_LIBRARY_H_
#define DISTOPT_COMMON_DYNAMIC_LIBRARY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distopt {

// The first of `candidates` (sonames or paths) that dlopen() accepts, and
// which it was in `*opened`. FAILED_PRECONDITION "<what>: cannot load it"
// naming every candidate with dlerror()'s reason, and where `soname` is
// expected, when none opens.
absl::StatusOr<void*> OpenFirstLibrary(
    const std::vector<std::string>& candidates, absl::string_view what,
    absl::string_view soname, std::string* opened);

// The address of function `name` in `handle` (opened from `library`);
// FAILED_PRECONDITION "<what>: <library> has no function <name>; expected
// <expected>" when it lacks it.
absl::StatusOr<void*> FindFunction(void* handle, const std::string& library,
                                   const char* name, absl::string_view what,
                                   absl::string_view expected);

// The same, typed.
template <typename Function>
absl::Status ResolveFunction(void* handle, const std::string& library,
                             const char* name, absl::string_view what,
                             absl::string_view expected, Function* function) {
  absl::StatusOr<void*> found =
      FindFunction(handle, library, name, what, expected);
  if (!found.ok()) return found.status();
  *function = reinterpret_cast<Function>(*found);
  return absl::OkStatus();
}

}  // namespace distopt

#endif  // DISTOPT_COMMON_DYNAMIC_LIBRARY_H_
