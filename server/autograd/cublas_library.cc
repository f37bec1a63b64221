#include "server/autograd/cublas_library.h"

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/dynamic_library.h"

namespace distopt {
namespace {

#define DISTOPT_CUBLAS_TEXT_(x) #x
#define DISTOPT_CUBLAS_TEXT(x) DISTOPT_CUBLAS_TEXT_(x)

// The soname of the cuBLAS whose headers the build compiled against. One
// literal, so that tools/gpu/bundle.sh finds it in the binary.
constexpr char kCublasSoname[] =
    "libcublas.so." DISTOPT_CUBLAS_TEXT(CUBLAS_VER_MAJOR);

}  // namespace

std::vector<std::string> CublasCandidates() {
  return {kCublasSoname,
          absl::StrCat(DISTOPT_CUDA_LIBRARY_DIR, "/", kCublasSoname)};
}

absl::StatusOr<CublasLibrary> OpenCublas(
    const std::vector<std::string>& candidates) {
  std::string opened;
  absl::StatusOr<void*> handle =
      OpenFirstLibrary(candidates, "cuBLAS", kCublasSoname, &opened);
  if (!handle.ok()) return handle.status();
  const std::string expected = absl::StrCat("cuBLAS ", CUBLAS_VER_MAJOR, ".x");
  CublasLibrary library;
  absl::Status status = ResolveFunction(*handle, opened, "cublasCreate_v2",
                                        "cuBLAS", expected, &library.create);
  if (status.ok()) {
    status = ResolveFunction(*handle, opened, "cublasSgemm_v2", "cuBLAS",
                             expected, &library.sgemm);
  }
  if (!status.ok()) {
    dlclose(*handle);
    return status;
  }
  return library;
}

absl::StatusOr<const CublasLibrary*> LoadCublas() {
  // Leaked on purpose, like the library it points into.
  static const absl::StatusOr<CublasLibrary>* const library =
      new absl::StatusOr<CublasLibrary>(OpenCublas(CublasCandidates()));
  if (!library->ok()) return library->status();
  return &**library;
}

}  // namespace distopt
