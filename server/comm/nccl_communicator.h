// NcclCommunicator: the Communicator over NCCL, for CUDA tensors: every span
// handed to it points to device memory of `device`. It is bootstrapped
// through the same RendezvousStore as gloo: rank 0 makes the NCCL unique id
// and publishes it under "<prefix>/unique_id"; the others wait for it.
//
// NCCL calls return before the GPU is done, and a collective whose peer died
// would never finish; so the communicator is created non-blocking, each
// collective runs on its own stream, and the host polls the stream and
// NCCL's asynchronous error until the timeout, when it aborts the NCCL
// communicator: a dead or missing peer is an error on every surviving rank
// (UNAVAILABLE, or DEADLINE_EXCEEDED), never a hang. After such an error the
// communicator is unusable and every later call fails.
//
// Compiled whenever the CUDA toolkit has NCCL; otherwise Create returns
// FAILED_PRECONDITION.
#ifndef DISTOPT_SERVER_COMM_NCCL_COMMUNICATOR_H_
#define DISTOPT_SERVER_COMM_NCCL_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/comm/communicator.h"
#include "server/comm/rendezvous_store.h"

namespace distopt {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  int device = 0;  // The CUDA device this rank's tensors live on.
  std::string prefix = "nccl";
  // For the rendezvous and for every collective.
  absl::Duration timeout = absl::Seconds(30);
};

// Whether this binary was built with NCCL.
bool NcclCompiledIn();

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const NcclOptions& options, RendezvousStore* store);

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_NCCL_COMMUNICATOR_H_
