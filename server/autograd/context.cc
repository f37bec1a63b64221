#include "server/autograd/context.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace distopt {

AutogradContext::AutogradContext(uint64_t id, absl::Time now,
                                 Reservation reservation, std::string owner)
    : id_(id),
      owner_(std::move(owner)),
      created_(now),
      reservation_(std::move(reservation)),
      last_used_(now) {}

absl::Status AutogradContext::Accumulate(
    const std::vector<GradientUpdate>& updates,
    const std::shared_ptr<Backend>& backend, MemoryBudget& budget) {
  const bool on_host = backend->device().is_cpu();
  absl::MutexLock lock(&mutex_);
  // 1. Everything that can fail, before anything changes: new gradients
  // reserved and made, addends staged on the device.
  std::map<uint64_t, StoredGradient> fresh;
  std::vector<bool> consumed(updates.size(), false);
  std::vector<std::optional<Tensor>> staged(updates.size());
  for (size_t u = 0; u < updates.size(); ++u) {
    const GradientUpdate& update = updates[u];
    const Parameter& parameter = *update.parameter;
    if (gradients_.count(parameter.id()) == 0 &&
        fresh.count(parameter.id()) == 0) {
      absl::StatusOr<Reservation> reservation =
          budget.Reserve(parameter.byte_size(),
                         absl::StrCat("gradient of parameter \"",
                                      parameter.name(), "\" in context ", id_));
      if (!reservation.ok()) return reservation.status();
      absl::StatusOr<Tensor> values;
      if (update.dense.has_value()) {
        values = update.dense->CloneTo(backend);
        consumed[u] = true;
      } else {
        values =
            Tensor::Allocate(backend, parameter.dtype(), parameter.shape());
        if (values.ok()) {
          absl::Status zeroed = backend->Fill(values->data(), values->dtype(),
                                              values->num_elements(), 0.0);
          if (!zeroed.ok()) return zeroed;
        }
      }
      if (!values.ok()) return values.status();
      fresh.emplace(parameter.id(), StoredGradient{*std::move(values),
                                                   *std::move(reservation)});
      if (consumed[u]) continue;
    }
    if (!on_host) {
      absl::StatusOr<Tensor> addend =
          (update.dense.has_value() ? *update.dense : update.row_values)
              .CloneTo(backend);
      if (!addend.ok()) return addend.status();
      staged[u] = *std::move(addend);
    }
  }
  // 2. The changes: on the host they cannot fail.
  gradients_.merge(fresh);
  for (size_t u = 0; u < updates.size(); ++u) {
    if (consumed[u]) continue;
    const GradientUpdate& update = updates[u];
    Tensor& sum = gradients_.at(update.parameter->id()).values;
    const Tensor& addend = staged[u].has_value()      ? *staged[u]
                           : update.dense.has_value() ? *update.dense
                                                      : update.row_values;
    if (update.dense.has_value()) {
      absl::Status status = backend->Add(sum.data(), addend.data(), sum.dtype(),
                                         sum.num_elements());
      if (!status.ok()) return status;
      continue;
    }
    const size_t row_bytes =
        addend.byte_size() / std::max<size_t>(1, update.rows.size());
    const size_t columns = row_bytes / ElementSize(sum.dtype());
    for (size_t r = 0; r < update.rows.size(); ++r) {
      absl::Status status = backend->Add(
          static_cast<char*>(sum.data()) + update.rows[r] * row_bytes,
          static_cast<const char*>(addend.data()) + r * row_bytes, sum.dtype(),
          columns);
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

uint64_t AutogradContext::AddForward(ForwardRecord record) {
  absl::MutexLock lock(&mutex_);
  const uint64_t id = next_forward_++;
  forwards_[id].record =
      std::make_shared<const ForwardRecord>(std::move(record));
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
  return it->second.record;
}

absl::StatusOr<AutogradContext::BackwardClaim> AutogradContext::BeginBackward(
    uint64_t forward_id, uint64_t digest) {
  absl::MutexLock lock(&mutex_);
  auto it = forwards_.find(forward_id);
  if (it == forwards_.end()) {
    return absl::NotFoundError(absl::StrCat("forward_id: no forward ",
                                            forward_id, " in context ", id_));
  }
  StoredForward& forward = it->second;
  switch (forward.backward) {
    case StoredForward::Backward::kNone:
      forward.backward = StoredForward::Backward::kInProgress;
      forward.digest = digest;
      return BackwardClaim::kFirst;
    case StoredForward::Backward::kInProgress:
      return absl::AbortedError(absl::StrCat(
          "forward_id: a backward of forward ", forward_id, " in context ", id_,
          " is in progress; expected one backward per forward (retry "
          "once it has ended)"));
    case StoredForward::Backward::kDone:
      break;
  }
  if (forward.digest != digest) {
    return absl::FailedPreconditionError(absl::StrCat(
        "forward_id: forward ", forward_id, " in context ", id_,
        " was backpropagated already, with other output gradients; expected "
        "one backward per forward, as torch (a retry must send the same "
        "output gradients)"));
  }
  return BackwardClaim::kRetry;
}

void AutogradContext::EndBackward(uint64_t forward_id, bool done) {
  absl::MutexLock lock(&mutex_);
  auto it = forwards_.find(forward_id);
  if (it == forwards_.end()) return;
  it->second.backward =
      done ? StoredForward::Backward::kDone : StoredForward::Backward::kNone;
}

std::vector<std::optional<Tensor>> AutogradContext::Gradients(
    absl::Span<const uint64_t> parameter_ids) const {
  std::vector<std::optional<Tensor>> gradients;
  gradients.reserve(parameter_ids.size());
  absl::MutexLock lock(&mutex_);
  for (uint64_t id : parameter_ids) {
    auto it = gradients_.find(id);
    gradients.push_back(it == gradients_.end()
                            ? std::nullopt
                            : std::optional<Tensor>(it->second.values));
  }
  return gradients;
}

std::vector<uint64_t> AutogradContext::GradientIds() const {
  absl::MutexLock lock(&mutex_);
  std::vector<uint64_t> ids;
  ids.reserve(gradients_.size());
  for (const auto& [id, gradient] : gradients_) ids.push_back(id);
  return ids;
}

bool AutogradContext::empty() const {
  absl::MutexLock lock(&mutex_);
  return gradients_.empty() && forwards_.empty();
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
  for (const auto& [forward_id, forward] : forwards_) {
    info.saved_bytes += forward.record->saved_reservation.bytes();
  }
  return info;
}

uint64_t DigestOf(const std::vector<Tensor>& tensors) {
  uint64_t digest = 0;
  for (const Tensor& tensor : tensors) {
    digest = absl::Hash<
        std::tuple<uint64_t, int, std::vector<int64_t>, absl::string_view>>()(
        std::make_tuple(
            digest, static_cast<int>(tensor.dtype()), tensor.shape(),
            absl::string_view(static_cast<const char*>(tensor.data()),
                              tensor.byte_size())));
  }
  return digest;
}

}  // namespace distopt
