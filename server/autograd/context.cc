#include "server/autograd/context.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace distopt {

AutogradContext::AutogradContext(uint64_t id, absl::Time now)
    : id_(id), created_(now), last_used_(now) {}

absl::Status AutogradContext::Accumulate(
    const Parameter& parameter, const Tensor& gradient,
    const std::shared_ptr<Backend>& backend, MemoryBudget& budget) {
  absl::MutexLock lock(&mutex_);
  auto it = gradients_.find(parameter.id());
  if (it == gradients_.end()) {
    absl::StatusOr<Reservation> reservation =
        budget.Reserve(gradient.byte_size(),
                       absl::StrCat("gradient of parameter \"",
                                    parameter.name(), "\" in context ", id_));
    if (!reservation.ok()) return reservation.status();
    absl::StatusOr<Tensor> copy = gradient.CloneTo(backend);
    if (!copy.ok()) return copy.status();
    gradients_.emplace(parameter.id(), StoredGradient{*std::move(copy),
                                                      *std::move(reservation)});
    return absl::OkStatus();
  }
  Tensor& sum = it->second.values;
  if (backend->device().is_cpu()) {
    return backend->Add(sum.data(), gradient.data(), sum.dtype(),
                        sum.num_elements());
  }
  // On a GPU: bring the addend over, then add there.
  absl::StatusOr<Tensor> staged = gradient.CloneTo(backend);
  if (!staged.ok()) return staged.status();
  return backend->Add(sum.data(), staged->data(), sum.dtype(),
                      sum.num_elements());
}

std::optional<Tensor> AutogradContext::Gradient(uint64_t parameter_id) const {
  absl::MutexLock lock(&mutex_);
  auto it = gradients_.find(parameter_id);
  if (it == gradients_.end()) return std::nullopt;
  return it->second.values;
}

void AutogradContext::Touch(absl::Time now) {
  absl::MutexLock lock(&mutex_);
  last_used_ = std::max(last_used_, now);
}

absl::Time AutogradContext::last_used() const {
  absl::MutexLock lock(&mutex_);
  return last_used_;
}

ContextInfo AutogradContext::Info() const {
  absl::MutexLock lock(&mutex_);
  ContextInfo info;
  info.id = id_;
  info.created = created_;
  info.last_used = last_used_;
  for (const auto& [parameter_id, gradient] : gradients_) {
    info.parameter_ids.push_back(parameter_id);
    info.bytes += gradient.reservation.bytes();
  }
  return info;
}

}  // namespace distopt
