// The communicators a round of a data-parallel group sends its tensors
// through: chosen from the ranks' devices (tensor_backend.h) once the
// round's gloo communicator is connected, then made for the whole group
// and for each subgroup the optimizers ask for (each paired with its gloo
// communicator for control, paired_communicator.h).
#ifndef DISTOPT_SERVER_COMM_TENSOR_COMMUNICATORS_H_
#define DISTOPT_SERVER_COMM_TENSOR_COMMUNICATORS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/device.h"
#include "server/comm/communicator.h"
#include "server/comm/rendezvous_store.h"
#include "server/comm/tensor_backend.h"

namespace distopt {

class TensorCommunicators {
 public:
  // Collective over `gloo` (every rank of the round calls it): exchanges
  // the ranks' devices (this one's is `device`) and chooses the
  // backend. FAILED_PRECONDITION naming the ranks and their devices for a
  // group that mixes host memory and GPUs. NCCL communicators are
  // bootstrapped through `store` (which must outlive this) under
  // `nccl_prefix`.
  static absl::StatusOr<TensorCommunicators> Choose(Communicator& gloo,
                                                    const Device& device,
                                                    RendezvousStore* store,
                                                    std::string nccl_prefix,
                                                    absl::Duration timeout);

  const TensorBackendChoice& choice() const { return choice_; }

  // Collective among `control`'s ranks: `control` (gloo, over host memory)
  // as is for a group in host memory; otherwise paired with its tensors'
  // NCCL or staged communicator on the ranks' GPU. `name` tells the
  // group's NCCL communicators apart ("" for the whole group).
  absl::StatusOr<std::unique_ptr<Communicator>> Pair(
      std::unique_ptr<Communicator> control, const std::string& name) const;

 private:
  TensorCommunicators(TensorBackendChoice choice, Device device,
                      RendezvousStore* store, std::string nccl_prefix,
                      absl::Duration timeout)
      : choice_(std::move(choice)),
        device_(device),
        store_(store),
        nccl_prefix_(std::move(nccl_prefix)),
        timeout_(timeout),
        pairs_(std::make_shared<std::atomic<int64_t>>(0)) {}

  TensorBackendChoice choice_;
  Device device_;
  RendezvousStore* store_;
  std::string nccl_prefix_;
  absl::Duration timeout_;
  // Pairs made so far, shared by the copies of this (the group's subgroup
  // maker holds one).
  std::shared_ptr<std::atomic<int64_t>> pairs_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_TENSOR_COMMUNICATORS_H_
