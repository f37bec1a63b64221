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

absl::Status AutogradContext::AccumulateRows(
    const Parameter& parameter, const std::vector<int64_t>& rows,
    const Tensor& row_values, const std::shared_ptr<Backend>& backend,
    MemoryBudget& budget) {
  absl::MutexLock lock(&mutex_);
  auto it = gradients_.find(parameter.id());
  if (it == gradients_.end()) {
    absl::StatusOr<Reservation> reservation =
        budget.Reserve(parameter.byte_size(),
                       absl::StrCat("gradient of parameter \"",
                                    parameter.name(), "\" in context ", id_));
    if (!reservation.ok()) return reservation.status();
    absl::StatusOr<Tensor> zeros =
        Tensor::Allocate(backend, parameter.dtype(), parameter.shape());
    if (!zeros.ok()) return zeros.status();
    absl::Status status = backend->Fill(zeros->data(), zeros->dtype(),
                                        zeros->num_elements(), 0.0);
    if (!status.ok()) return status;
    it = gradients_
             .emplace(parameter.id(), StoredGradient{*std::move(zeros),
                                                     *std::move(reservation)})
             .first;
  }
  Tensor& sum = it->second.values;
  const size_t row_bytes =
      row_values.byte_size() / std::max<size_t>(1, rows.size());
  const size_t columns = row_bytes / ElementSize(sum.dtype());
  absl::StatusOr<Tensor> staged = row_values.CloneTo(backend);
  if (!staged.ok()) return staged.status();
  for (size_t r = 0; r < rows.size(); ++r) {
    absl::Status status =
        backend->Add(static_cast<char*>(sum.data()) + rows[r] * row_bytes,
                     static_cast<const char*>(staged->data()) + r * row_bytes,
                     sum.dtype(), columns);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

uint64_t AutogradContext::AddForward(ForwardRecord record) {
  absl::MutexLock lock(&mutex_);
  const uint64_t id = next_forward_++;
  forwards_[id] = std::make_shared<const ForwardRecord>(std::move(record));
  return id;
}

absl::StatusOr<std::shared_ptr<const AutogradContext::ForwardRecord>>
AutogradContext::Forward(uint64_t forward_id) const {
  absl::MutexLock lock(&mutex_);
  auto it = forwards_.find(forward_id);
  if (it == forwards_.end()) {
    return absl::NotFoundError(absl::StrCat("forward_id: no forward ",
                                            forward_id, " in context ", id_));
  }
  return it->second;
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
