// DistributedOptimizer: torch.distributed.optim.DistributedOptimizer for
// parameters on worker daemons.
//
// Parameters are grouped by owner in order of first appearance and one
// optimizer is created per owner, all in parallel; if any creation fails,
// those already made are deleted. Step(context_id) refuses a context this
// client does not hold before any call, then sends the step to every owner
// at once over the client's open step streams (StepStreams) and waits for
// all; an error names each failed worker and lists those that
// did apply the step. A step retried after a lost reply is not applied twice
// (the workers remember it). The remote optimizers are deleted with this
// object. Thread-safe for concurrent Step calls with different contexts.
#ifndef DISTOPT_CLIENT_DISTRIBUTED_OPTIMIZER_H_
#define DISTOPT_CLIENT_DISTRIBUTED_OPTIMIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/hyperparameters.h"
#include "client/remote_parameter.h"
#include "common/thread_pool.h"

namespace distopt {

class DistributedOptimizer {
 public:
  static absl::StatusOr<std::unique_ptr<DistributedOptimizer>> Create(
      Client* client, const std::string& kind,
      const std::vector<RemoteParameter>& parameters,
      const HyperparameterMap& hyperparameters = {});
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  absl::Status Step(uint64_t context_id);

  // On every owner (for learning-rate schedules); all owners are tried.
  absl::Status SetHyperparameters(const HyperparameterMap& changes);

  // Owners in order of first appearance, with their optimizer ids.
  struct Owner {
    std::string worker;
    uint64_t optimizer_id = 0;
    std::vector<uint64_t> parameter_ids;
  };
  const std::vector<Owner>& owners() const { return owners_; }

 private:
  DistributedOptimizer(Client* client, std::vector<Owner> owners,
                       std::unique_ptr<ThreadPool> pool)
      : client_(client), owners_(std::move(owners)), pool_(std::move(pool)) {}

  Client* const client_;
  const std::vector<Owner> owners_;
  // Fans the per-owner unary calls (creation, hyperparameters) out without
  // starting threads each time.
  const std::unique_ptr<ThreadPool> pool_;
};

}  // namespace distopt

#endif  // DISTOPT_CLIENT_DISTRIBUTED_OPTIMIZER_H_
