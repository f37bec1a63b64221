#include "client/dist_autograd_context.h"

#include <map>

#include "common/cpu_backend.h"

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

Variable DistAutogradContext::Record(const std::vector<Variable>& inputs,
                                     Tensor output, BackwardFunction backward) {
  Node node;
  for (const Variable& input : inputs) node.inputs.push_back(input.node);
  node.backward = std::move(backward);
  tape_.push_back(std::move(node));
  return Variable{std::move(output), static_cast<int64_t>(tape_.size()) - 1};
}

absl::Status DistAutogradContext::Backward(const Variable& root,
                                           const Tensor& root_gradient) {
  if (root.node < 0) {
    return absl::InvalidArgumentError(
        "root: the value was not computed on this context's tape");
  }
  std::map<int64_t, Tensor> gradients;
  gradients.emplace(root.node, root_gradient);
  for (int64_t n = root.node; n >= 0; --n) {
    auto it = gradients.find(n);
    if (it == gradients.end()) continue;  // Not on the path to the root.
    absl::StatusOr<std::vector<std::optional<Tensor>>> inputs =
        tape_[n].backward(it->second);
    if (!inputs.ok()) return inputs.status();
    gradients.erase(it);
    for (size_t i = 0; i < inputs->size() && i < tape_[n].inputs.size(); ++i) {
      const int64_t producer = tape_[n].inputs[i];
      if (producer < 0 || !(*inputs)[i].has_value()) continue;
      auto [existing, added] = gradients.try_emplace(producer, *(*inputs)[i]);
      if (!added) {
        // Used twice: the gradients add up (fresh storage, not shared).
        Tensor sum = *existing->second.CloneTo(CpuBackend());
        CpuBackend()
            ->Add(sum.data(), (*inputs)[i]->data(), sum.dtype(),
                  sum.num_elements())
            .IgnoreError();
        existing->second = std::move(sum);
      }
    }
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
