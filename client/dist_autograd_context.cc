#include "client/dist_autograd_context.h"

#include <map>

namespace distopt {

DistAutogradContext::DistAutogradContext(Client* client)
    : client_(client), id_(client->NewContextId()) {}

DistAutogradContext::~DistAutogradContext() { Release().IgnoreError(); }

absl::Status DistAutogradContext::AccumulateGradients(
    const std::vector<std::pair<RemoteParameter, Tensor>>& gradients) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::pair<uint64_t, Tensor>>> by_worker;
  for (const auto& [parameter, gradient] : gradients) {
    auto [it, added] = by_worker.try_emplace(parameter.worker);
    if (added) order.push_back(parameter.worker);
    it->second.emplace_back(parameter.id, gradient);
  }
  for (const std::string& worker : order) {
    workers_.insert(worker);
    absl::Status status =
        client_->AccumulateGradients(worker, id_, by_worker.at(worker));
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status DistAutogradContext::Release() {
  if (released_) return absl::OkStatus();
  released_ = true;
  absl::Status first_error;
  for (const std::string& worker : workers_) {
    absl::StatusOr<bool> released = client_->ReleaseContext(worker, id_);
    if (!released.ok() && first_error.ok()) first_error = released.status();
  }
  client_->ForgetContext(id_);
  return first_error;
}

}  // namespace distopt
