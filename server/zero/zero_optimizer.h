// ZeroOptimizer: ZeRO-1 over a Communicator, as torch's
// ZeroRedundancyOptimizer. Every rank holds the full model; optimizer state
// is kept only for this rank's partition (partition.h). A step averages the
// gradients across ranks (the job DDP does), steps this rank's parameters,
// then each parameter is broadcast from its owner, so all ranks end equal.
//
// All ranks call Create and Step together, with the same groups in the same
// order (collectives pair up by order). Not thread-safe.
#ifndef DISTOPT_SERVER_ZERO_ZERO_OPTIMIZER_H_
#define DISTOPT_SERVER_ZERO_ZERO_OPTIMIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/comm/communicator.h"
#include "server/optim/functional_optimizer.h"
#include "server/zero/partition.h"

namespace distopt {

struct ZeroParamGroup {
  absl::flat_hash_map<std::string, HyperValue> hyperparameters;
  std::vector<Tensor*> params;  // Host float32, owned by the caller.
};

class ZeroOptimizer {
 public:
  // `communicator` must outlive the optimizer. INVALID_ARGUMENT for
  // parameters that are not host float32, or bad hyperparameters;
  // FAILED_PRECONDITION on every rank, saying what differs, when the ranks
  // were not given the same kind, hyperparameters and parameter shapes.
  static absl::StatusOr<std::unique_ptr<ZeroOptimizer>> Create(
      Communicator* communicator, const OptimizerKind* kind,
      const std::string& kind_name, std::vector<ZeroParamGroup> groups);

  // grads[g][i] for params[g][i] (host float32, same shape). Every rank
  // must pass gradients for the same parameters (a null one is skipped on
  // all ranks). Errors of the collectives (a lost rank) come back as they
  // are.
  absl::Status Step(const std::vector<std::vector<const Tensor*>>& grads);

  const ZeroPartition& partition() const { return partition_; }
  // Bytes of optimizer state this rank holds.
  int64_t state_bytes() const;

 private:
  ZeroOptimizer(Communicator* communicator, std::vector<ZeroParamGroup> groups,
                ZeroPartition partition,
                std::vector<std::unique_ptr<FunctionalOptimizer>> local)
      : communicator_(communicator),
        groups_(std::move(groups)),
        partition_(std::move(partition)),
        local_(std::move(local)) {}

  Communicator* const communicator_;
  const std::vector<ZeroParamGroup> groups_;
  const ZeroPartition partition_;
  // Per group: the optimizer over this rank's parameters of the group (null
  // when it owns none).
  std::vector<std::unique_ptr<FunctionalOptimizer>> local_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_ZERO_ZERO_OPTIMIZER_H_
