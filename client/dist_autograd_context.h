// DistAutogradContext: the scope of one distributed autograd context, as
// `with dist_autograd.context() as context_id:` in PyTorch. It owns a fresh
// context id, remembers every worker the context touched, and releases the
// context on all of them when the scope ends.
//
// It also keeps the tape of the forward pass: remote layers (layers.h) and
// local ops (local_ops.h) record how to run their backward, and
// Backward(loss) runs them in reverse order, as dist_autograd.backward does,
// so that the parameters' gradients accumulate on their owners. Not
// thread-safe; the Client must outlive it.
#ifndef DISTOPT_CLIENT_DIST_AUTOGRAD_CONTEXT_H_
#define DISTOPT_CLIENT_DIST_AUTOGRAD_CONTEXT_H_

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/client.h"
#include "client/remote_parameter.h"
#include "common/tensor.h"

namespace distopt {

// A value in the forward pass, and the tape node that made it (-1 for an
// input that needs no gradient).
struct Variable {
  Tensor value;
  int64_t node = -1;
};

class DistAutogradContext {
 public:
  explicit DistAutogradContext(Client* client);
  // Releases the context on every worker it touched (errors are ignored:
  // a worker that is gone collects it after --context_ttl).
  ~DistAutogradContext();
  DistAutogradContext(const DistAutogradContext&) = delete;
  DistAutogradContext& operator=(const DistAutogradContext&) = delete;

  uint64_t id() const { return id_; }
  const std::set<std::string>& workers() const { return workers_; }

  // Adds gradients computed here to the parameters' owners, one call per
  // worker. Stops at the first failing worker and names it.
  absl::Status AccumulateGradients(
      const std::vector<std::pair<RemoteParameter, Tensor>>& gradients);

  // Releases now and reports the first failure; the destructor then does
  // nothing.
  absl::Status Release();

  // The gradient of one op's inputs from its output's gradient; nullopt for
  // inputs without one.
  using BackwardFunction =
      std::function<absl::StatusOr<std::vector<std::optional<Tensor>>>(
          const Tensor& output_gradient)>;

  // Records an op with `inputs` and one `output`; returns the output as a
  // variable of the tape.
  Variable Record(const std::vector<Variable>& inputs, Tensor output,
                  BackwardFunction backward);
  // Notes that `worker` holds state of this context.
  void Touch(const std::string& worker) { workers_.insert(worker); }

  // Runs the tape backwards from `root` with gradient `root_gradient` (1
  // for a scalar loss). Gradients of a variable used twice add up.
  absl::Status Backward(const Variable& root, const Tensor& root_gradient);

 private:
  Client* const client_;
  const uint64_t id_;
  std::set<std::string> workers_;
  bool released_ = false;
  struct Node {
    std::vector<int64_t> inputs;  // Nodes of the inputs (-1: none).
    BackwardFunction backward;
  };
  std::vector<Node> tape_;
};

}  // namespace distopt

#endif  // DISTOPT_CLIENT_DIST_AUTOGRAD_CONTEXT_H_
