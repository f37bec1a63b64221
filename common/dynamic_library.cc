#include "common/dynamic_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace distopt {

absl::StatusOr<void*> OpenFirstLibrary(
    const std::vector<std::string>& candidates, absl::string_view what,
    absl::string_view soname, std::string* opened) {
  std::vector<std::string> failures;
  for (const std::string& candidate : candidates) {
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      *opened = candidate;
      return handle;
    }
    const char* reason = dlerror();
    failures.push_back(
        absl::StrCat(candidate, ": ", reason != nullptr ? reason : "?"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": cannot load it (", absl::StrJoin(failures, "; "), "); expected ",
      soname, " on LD_LIBRARY_PATH or in the CUDA toolkit's lib64 folder"));
}

absl::StatusOr<void*> FindFunction(void* handle, const std::string& library,
                                   const char* name, absl::string_view what,
                                   absl::string_view expected) {
  void* function = dlsym(handle, name);
  if (function != nullptr) return function;
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": ", library, " has no function ", name, "; expected ", expected));
}

}  // namespace distopt
