// StagedCommunicator: collectives over one device's memory (a GPU's) run by
// a host communicator (gloo) through page-locked staging buffers: for ranks
// that share a GPU (NCCL needs a GPU per rank) or a build without NCCL.
//
// Every collective is cut into chunks of at most `chunk_bytes` of host
// staging, in two buffers: while the host collective runs on chunk k, a
// helper thread copies chunk k - 1 back to the device and chunk k + 1 to
// the host, so the copies overlap the transfer. The staging is bounded by
// the chunk size, whatever the tensors' size. The in-place block
// collectives (ReduceScatterBlocks, AllGatherBlocks) go round by round, a
// piece of every rank's block per round, so that every rank's staging and
// every round's blocks stay bounded too.
//
// Timeouts and failures are the host communicator's: a dead peer is its
// error on every surviving rank. A copy that fails (a CUDA error) does not
// stop this rank's part in the remaining chunks' collectives (a chunk it
// could not stage goes out as zeros), so that no peer waits for it; the
// call then returns the copy's error marked as a collective failure
// (communicator.h): the caller treats it as a broken round, as it would a
// lost peer. Serialised as any communicator: one collective at a time.
#ifndef DISTOPT_SERVER_COMM_STAGED_COMMUNICATOR_H_
#define DISTOPT_SERVER_COMM_STAGED_COMMUNICATOR_H_

#include <cstddef>
#include <memory>

#include "common/backend.h"
#include "server/comm/communicator.h"

namespace distopt {

// 4 MiB: large enough that a chunk's transfer outlasts its copies' start-up
// cost, small enough that two of them are nothing beside a model.
inline constexpr size_t kDefaultStagingChunkBytes = size_t{4} << 20;

// `host` (over host memory) must outlive the returned communicator; its
// spans are `device`'s memory. `chunk_bytes` is raised to 4 bytes per rank
// plus 4 when smaller.
std::unique_ptr<Communicator> CreateStagedCommunicator(
    Communicator* host, std::shared_ptr<Backend> device,
    size_t chunk_bytes = kDefaultStagingChunkBytes);

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_STAGED_COMMUNICATOR_H_
