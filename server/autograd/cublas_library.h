// cuBLAS, opened with dlopen() the first time a CUDA op needs it instead of
// being linked. A linked cuBLAS is mapped into every daemon at start-up, and
// libcublasLt's code and static data alone then keep about 146 MB resident
// in a daemon that never touches a GPU. Only the functions distopt calls are
// resolved.
//
// Where it is looked for, in order: the dynamic loader's own search for the
// soname of the cuBLAS the build compiled against (LD_LIBRARY_PATH, the
// ld.so cache, the system folders), then the lib64 folder of the toolkit
// that the build found. The handle is never closed.
//
// Compiled only with a CUDA toolkit (it needs cuBLAS's headers); nvcc
// includes this header too.
#ifndef DISTOPT_SERVER_AUTOGRAD_CUBLAS_LIBRARY_H_
#define DISTOPT_SERVER_AUTOGRAD_CUBLAS_LIBRARY_H_

#include <cublas_v2.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace distopt {

// The cuBLAS functions distopt calls.
struct CublasLibrary {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
};

// The places LoadCublas() tries, in order: "libcublas.so.<major>", then the
// same file in the build's toolkit folder.
std::vector<std::string> CublasCandidates();

// Opens the first of `candidates` (sonames or paths) that dlopen() accepts
// and resolves the functions. FAILED_PRECONDITION naming every candidate
// with dlerror()'s reason when none opens, or the missing function when the
// library lacks one. Each call opens anew; use LoadCublas().
absl::StatusOr<CublasLibrary> OpenCublas(
    const std::vector<std::string>& candidates);

// OpenCublas(CublasCandidates()) on the first call; later calls return the
// first call's result, a failure too. Thread-safe.
absl::StatusOr<const CublasLibrary*> LoadCublas();

}  // namespace distopt

#endif  // DISTOPT_SERVER_AUTOGRAD_CUBLAS_LIBRARY_H_
