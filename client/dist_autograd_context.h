// DistAutogradContext: the scope of one distributed autograd context, as
// `with dist_autograd.context() as context_id:` in PyTorch. It owns a fresh
// context id, remembers every worker the context touched, and releases the
// context on all of them when the scope ends. Not thread-safe; the Client
// must outlive it.
#ifndef DISTOPT_CLIENT_DIST_AUTOGRAD_CONTEXT_H_
#define DISTOPT_CLIENT_DIST_AUTOGRAD_CONTEXT_H_

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/client.h"
#include "client/remote_parameter.h"
#include "common/tensor.h"

namespace distopt {

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

 private:
  Client* const client_;
  const uint64_t id_;
  std::set<std::string> workers_;
  bool released_ = false;
};

}  // namespace distopt

#endif  // DISTOPT_CLIENT_DIST_AUTOGRAD_CONTEXT_H_
