#include "server/params/parameter_store.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/page_after.h"
#include "common/quoted.h"

namespace distopt {

absl::Status ValidateParameterName(absl::string_view name,
                                   absl::string_view field) {
  if (name.empty() || name.size() > ParameterStore::kMaxNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", name.size(), " characters; expected 1 to ",
                     ParameterStore::kMaxNameLength));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": character ", i,
          " is not printable ASCII; expected characters from ' ' to '~'"));
    }
  }
  return absl::OkStatus();
}

ParameterStore::ParameterStore(std::shared_ptr<Backend> backend,
                               MemoryBudget* budget)
    : backend_(std::move(backend)), budget_(budget) {}

absl::StatusOr<ParameterInfo> ParameterStore::Create(
    const CreateParameterSpec& spec) {
  absl::Status status = ValidateParameterName(spec.name, "name");
  if (!status.ok()) return status;
  absl::StatusOr<int64_t> count =
      CheckedNumElements(spec.shape, spec.dtype, "shape");
  if (!count.ok()) return count.status();
  const size_t byte_size =
      static_cast<size_t>(*count) * ElementSize(spec.dtype);
  status = ValidateInitializer(spec.initializer, spec.dtype, byte_size);
  if (!status.ok()) return status;
  {
    // Checked again on insertion; checking first spares a large allocation.
    absl::MutexLock lock(&mutex_);
    if (id_by_name_.contains(spec.name)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "name: a parameter named \"", spec.name, "\" already exists (id ",
          id_by_name_.at(spec.name), "); expected a new name"));
    }
  }
  absl::StatusOr<Reservation> reservation = budget_->Reserve(
      byte_size, absl::StrCat("parameter \"", spec.name, "\""));
  if (!reservation.ok()) return reservation.status();
  absl::StatusOr<Tensor> values =
      Tensor::Allocate(backend_, spec.dtype, spec.shape);
  if (!values.ok()) return values.status();
  status = ApplyInitializer(spec.initializer, *backend_, *values);
  if (!status.ok()) return status;

  absl::MutexLock lock(&mutex_);
  if (id_by_name_.contains(spec.name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("name: a parameter named \"", spec.name,
                     "\" was created concurrently; expected a new name"));
  }
  // Ids are never reused: the last one there is ends them (a restored
  // checkpoint may have used them up).
  if (next_id_ == std::numeric_limits<uint64_t>::max()) {
    return absl::ResourceExhaustedError(
        "no parameter ids left on this daemon (they are never reused); "
        "expected a new daemon for new parameters");
  }
  const uint64_t id = next_id_++;
  auto parameter = std::make_shared<Parameter>(
      id, spec.name, *std::move(values), *std::move(reservation));
  id_by_name_[spec.name] = id;
  by_id_[id] = parameter;
  return parameter->Info();
}

absl::StatusOr<std::shared_ptr<Parameter>> ParameterStore::Find(
    const ParameterKey& key) const {
  absl::MutexLock lock(&mutex_);
  if (key.id.has_value()) {
    auto it = by_id_.find(*key.id);
    if (it == by_id_.end()) {
      return absl::NotFoundError(
          absl::StrCat("parameter.id: no parameter with id ", *key.id));
    }
    return it->second;
  }
  auto it = id_by_name_.find(key.name);
  if (it == id_by_name_.end()) {
    return absl::NotFoundError(
        absl::StrCat("parameter.name: no parameter named ", Quoted(key.name)));
  }
  return by_id_.at(it->second);
}

ParameterPage ParameterStore::List(absl::string_view name_prefix,
                                   uint64_t after_id, size_t limit) const {
  IdPage<std::shared_ptr<Parameter>> selected;
  {
    absl::MutexLock lock(&mutex_);
    selected = PageAfter(by_id_, after_id, limit, [&](const auto& parameter) {
      return absl::StartsWith(parameter->name(), name_prefix);
    });
  }
  ParameterPage page;
  page.next_after_id = selected.next_after_id;
  page.parameters.reserve(selected.values.size());
  for (const auto& parameter : selected.values) {
    page.parameters.push_back(parameter->Info());
  }
  return page;
}

absl::StatusOr<ParameterInfo> ParameterStore::Delete(const ParameterKey& key) {
  absl::StatusOr<std::shared_ptr<Parameter>> parameter = Find(key);
  if (!parameter.ok()) return parameter.status();
  {
    absl::MutexLock lock(&mutex_);
    if (by_id_.erase((*parameter)->id()) == 0) {
      return absl::NotFoundError(absl::StrCat("parameter: ", (*parameter)->id(),
                                              " was deleted concurrently"));
    }
    id_by_name_.erase((*parameter)->name());
  }
  (*parameter)->MarkDeleted();
  return (*parameter)->Info();
}

absl::Status ParameterStore::RestoredIdsAreFree(
    absl::Span<const ParameterInfo> infos) const {
  absl::MutexLock lock(&mutex_);
  return RestoredIdsAreFreeLocked(infos);
}

absl::Status ParameterStore::RestoredIdsAreFreeLocked(
    absl::Span<const ParameterInfo> infos) const {
  absl::flat_hash_set<uint64_t> ids;  // Among `infos`.
  absl::flat_hash_set<std::string> names;
  for (const ParameterInfo& info : infos) {
    if (by_id_.count(info.id) != 0 || id_by_name_.contains(info.name) ||
        !ids.insert(info.id).second || !names.insert(info.name).second) {
      return absl::AlreadyExistsError(absl::StrCat(
          "parameter ", info.id, " (\"", info.name, "\") is restored twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::Restore(
    absl::Span<const ParameterInfo> infos,
    const std::function<absl::Status(absl::Span<Tensor>)>& fill) {
  // Checked before the values are read (a restore reads gigabytes), and
  // again when they are added.
  absl::Status taken = RestoredIdsAreFree(infos);
  if (!taken.ok()) return taken;
  std::vector<Reservation> reservations;
  std::vector<Tensor> values;
  reservations.reserve(infos.size());
  values.reserve(infos.size());
  for (const ParameterInfo& info : infos) {
    absl::Status status = ValidateParameterName(info.name, "name");
    if (!status.ok()) return status;
    absl::StatusOr<Reservation> reservation =
        budget_->Reserve(static_cast<uint64_t>(info.byte_size),
                         absl::StrCat("parameter \"", info.name, "\""));
    if (!reservation.ok()) return reservation.status();
    absl::StatusOr<Tensor> tensor =
        Tensor::Allocate(backend_, info.dtype, info.shape);
    if (!tensor.ok()) {
      return absl::Status(
          tensor.status().code(),
          absl::StrCat("parameter \"", info.name, "\" (", info.byte_size,
                       " bytes): ", tensor.status().message()));
    }
    reservations.push_back(*std::move(reservation));
    values.push_back(*std::move(tensor));
  }
  absl::Status status = fill(absl::MakeSpan(values));
  if (!status.ok()) return status;
  absl::MutexLock lock(&mutex_);
  taken = RestoredIdsAreFreeLocked(infos);
  if (!taken.ok()) return taken;
  for (size_t i = 0; i < infos.size(); ++i) {
    const ParameterInfo& info = infos[i];
    by_id_[info.id] =
        std::make_shared<Parameter>(info.id, info.name, std::move(values[i]),
                                    std::move(reservations[i]), info.version);
    id_by_name_[info.name] = info.id;
    next_id_ = std::max(next_id_, info.id + 1);
  }
  return absl::OkStatus();
}

ParameterStore::Census ParameterStore::Count() const {
  absl::MutexLock lock(&mutex_);
  Census census;
  census.parameters = by_id_.size();
  for (const auto& [id, parameter] : by_id_) {
    census.bytes += parameter->byte_size();
  }
  return census;
}

uint64_t ParameterStore::next_id() const {
  absl::MutexLock lock(&mutex_);
  return next_id_;
}

void ParameterStore::ReserveIdsBelow(uint64_t next_id) {
  absl::MutexLock lock(&mutex_);
  next_id_ = std::max(next_id_, next_id);
}

}  // namespace distopt
