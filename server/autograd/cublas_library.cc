#include "server/autograd/cublas_library.h"

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace distopt {
namespace {

#define DISTOPT_CUBLAS_TEXT_(x) #x
#define DISTOPT_CUBLAS_TEXT(x) DISTOPT_CUBLAS_TEXT_(x)

// The soname of the cuBLAS whose headers the build compiled against. One
// literal, so that tools/gpu/bundle.sh finds it in the binary.
constexpr char kCublasSoname[] =
    "libcublas.so." DISTOPT_CUBLAS_TEXT(CUBLAS_VER_MAJOR);

template <typename Function>
absl::Status Resolve(void* handle, const std::string& library, const char* name,
                     Function* function) {
  *function = reinterpret_cast<Function>(dlsym(handle, name));
  if (*function != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cuBLAS: ", library, " has no function ", name,
                   "; expected cuBLAS ", CUBLAS_VER_MAJOR, ".x"));
}

}  // namespace

std::vector<std::string> CublasCandidates() {
  return {kCublasSoname,
          absl::StrCat(DISTOPT_CUDA_LIBRARY_DIR, "/", kCublasSoname)};
}

absl::StatusOr<CublasLibrary> OpenCublas(
    const std::vector<std::string>& candidates) {
  std::vector<std::string> failures;
  for (const std::string& candidate : candidates) {
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* reason = dlerror();
      failures.push_back(
          absl::StrCat(candidate, ": ", reason != nullptr ? reason : "?"));
      continue;
    }
    CublasLibrary library;
    absl::Status status =
        Resolve(handle, candidate, "cublasCreate_v2", &library.create);
    if (status.ok()) {
      status = Resolve(handle, candidate, "cublasSgemm_v2", &library.sgemm);
    }
    if (!status.ok()) {
      dlclose(handle);
      return status;
    }
    return library;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "cuBLAS: cannot load it (", absl::StrJoin(failures, "; "), "); expected ",
      kCublasSoname,
      " on LD_LIBRARY_PATH or in the CUDA toolkit's lib64 folder"));
}

absl::StatusOr<const CublasLibrary*> LoadCublas() {
  // Leaked on purpose, like the library it points into.
  static const absl::StatusOr<CublasLibrary>* const library =
      new absl::StatusOr<CublasLibrary>(OpenCublas(CublasCandidates()));
  if (!library->ok()) return library->status();
  return &**library;
}

}  // namespace distopt
