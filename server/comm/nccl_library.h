// NCCL, opened with dlopen() the first time a group of GPU ranks needs it
// instead of being linked: a linked libnccl is mapped into every daemon at
// start-up, CPU daemons included (see tests/idle_footprint_test.cc), as
// cuBLAS was (server/autograd/cublas_library.h, which this follows). Only
// the functions distopt calls are resolved.
//
// Where it is looked for, in order: the dynamic loader's own search for the
// soname of the NCCL the build compiled against (LD_LIBRARY_PATH, the
// ld.so cache, the system folders), then the lib64 folder of the toolkit
// that the build found. The handle is never closed.
//
// Compiled only with NCCL's headers (NCCL_ENABLED).
#ifndef DISTOPT_SERVER_COMM_NCCL_LIBRARY_H_
#define DISTOPT_SERVER_COMM_NCCL_LIBRARY_H_

#include <nccl.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace distopt {

// The NCCL functions distopt calls.
struct NcclLibrary {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclReduce) reduce = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
};

// The places LoadNccl() tries, in order: "libnccl.so.<major>", then the
// same file in the build's toolkit folder.
std::vector<std::string> NcclCandidates();

// Opens the first of `candidates` that dlopen() accepts and resolves the
// functions. FAILED_PRECONDITION naming every candidate with dlerror()'s
// reason when none opens, or the missing function.
absl::StatusOr<NcclLibrary> OpenNccl(
    const std::vector<std::string>& candidates);

// OpenNccl(NcclCandidates()) on the first call; later calls return the
// first call's result, a failure too. Thread-safe.
absl::StatusOr<const NcclLibrary*> LoadNccl();

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_NCCL_LIBRARY_H_
