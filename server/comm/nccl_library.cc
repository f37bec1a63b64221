#include "server/comm/nccl_library.h"

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/dynamic_library.h"

namespace distopt {
namespace {

#define DISTOPT_NCCL_TEXT_(x) #x
#define DISTOPT_NCCL_TEXT(x) DISTOPT_NCCL_TEXT_(x)

// The soname of the NCCL whose headers the build compiled against. One
// literal, so that tools/gpu/bundle.sh finds it in the binary.
constexpr char kNcclSoname[] = "libnccl.so." DISTOPT_NCCL_TEXT(NCCL_MAJOR);

absl::Status ResolveAll(void* handle, const std::string& library,
                        NcclLibrary* nccl) {
  const std::string expected =
      absl::StrCat("NCCL ", NCCL_MAJOR, ".", NCCL_MINOR, " or later");
  auto resolve = [&](const char* name, auto* function) {
    return ResolveFunction(handle, library, name, "NCCL", expected, function);
  };
  for (absl::Status status : {
           resolve("ncclGetUniqueId", &nccl->get_unique_id),
           resolve("ncclCommInitRankConfig", &nccl->comm_init_rank_config),
           resolve("ncclCommGetAsyncError", &nccl->comm_get_async_error),
           resolve("ncclCommAbort", &nccl->comm_abort),
           resolve("ncclCommDestroy", &nccl->comm_destroy),
           resolve("ncclGetErrorString", &nccl->get_error_string),
           resolve("ncclAllReduce", &nccl->all_reduce),
           resolve("ncclAllGather", &nccl->all_gather),
           resolve("ncclBroadcast", &nccl->broadcast),
           resolve("ncclReduce", &nccl->reduce),
           resolve("ncclReduceScatter", &nccl->reduce_scatter),
           resolve("ncclSend", &nccl->send),
           resolve("ncclRecv", &nccl->recv),
           resolve("ncclGroupStart", &nccl->group_start),
           resolve("ncclGroupEnd", &nccl->group_end),
       }) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> NcclCandidates() {
  return {kNcclSoname,
          absl::StrCat(DISTOPT_CUDA_LIBRARY_DIR, "/", kNcclSoname)};
}

absl::StatusOr<NcclLibrary> OpenNccl(
    const std::vector<std::string>& candidates) {
  std::string opened;
  absl::StatusOr<void*> handle =
      OpenFirstLibrary(candidates, "NCCL", kNcclSoname, &opened);
  if (!handle.ok()) return handle.status();
  NcclLibrary library;
  absl::Status status = ResolveAll(*handle, opened, &library);
  if (!status.ok()) {
    dlclose(*handle);
    return status;
  }
  return library;
}

absl::StatusOr<const NcclLibrary*> LoadNccl() {
  // Leaked on purpose, like the library it points into.
  static const absl::StatusOr<NcclLibrary>* const library =
      new absl::StatusOr<NcclLibrary>(OpenNccl(NcclCandidates()));
  if (!library->ok()) return library->status();
  return &**library;
}

}  // namespace distopt
