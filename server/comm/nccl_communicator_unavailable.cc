// Built without a CUDA toolkit (or one without NCCL).
#include "server/comm/nccl_communicator.h"

namespace distopt {

bool NcclCompiledIn() { return false; }

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const NcclOptions&, RendezvousStore*) {
  return absl::FailedPreconditionError(
      "nccl: this binary was built without CUDA and NCCL; expected a build "
      "with the CUDA toolkit present (see README, Build)");
}

}  // namespace distopt
