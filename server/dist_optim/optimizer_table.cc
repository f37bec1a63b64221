#include "server/dist_optim/optimizer_table.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "server/optim/step_metrics.h"
#include "server/params/parameter_lookup.h"
#include "server/params/parameter_update.h"

namespace distopt {

OptimizerTable::OptimizerTable(ParameterStore* parameters,
                               ContextTable* contexts,
                               const OptimizerRegistry* kinds)
    : parameters_(parameters), contexts_(contexts), kinds_(kinds) {}

OptimizerInfo OptimizerTable::InfoLocked(const Entry& entry) {
  OptimizerInfo info;
  info.id = entry.id;
  info.kind = entry.kind;
  info.hyperparameters = entry.optimizer->hyperparameters().values();
  for (const auto& parameter : entry.parameters) {
    info.parameter_ids.push_back(parameter->id());
  }
  info.steps = entry.steps;
  info.device = entry.optimizer->device();
  return info;
}

absl::StatusOr<std::shared_ptr<OptimizerTable::Entry>>
OptimizerTable::MakeEntry(
    const std::string& kind_name,
    const absl::flat_hash_map<std::string, HyperValue>& hyperparameters,
    const std::vector<uint64_t>& parameter_ids) const {
  absl::StatusOr<const OptimizerKind*> kind = kinds_->Find(kind_name);
  if (!kind.ok()) return kind.status();
  if (parameter_ids.empty()) {
    return absl::InvalidArgumentError(
        "parameter_ids: empty; expected at least one parameter");
  }
  auto entry = std::make_shared<Entry>();
  entry->kind = kind_name;
  entry->step_metrics = &StepMetrics::For("distributed", kind_name);
  absl::StatusOr<std::vector<std::shared_ptr<Parameter>>> parameters =
      FindDistinctParameters(
          *parameters_, KeysById(parameter_ids),
          [](size_t i) { return absl::StrCat("parameter_ids[", i, "]"); });
  if (!parameters.ok()) return parameters.status();
  entry->parameters = *std::move(parameters);
  std::vector<ParameterLayout> layouts;
  for (const auto& parameter : entry->parameters) {
    layouts.push_back({parameter->dtype(), parameter->shape()});
  }
  absl::StatusOr<std::unique_ptr<FunctionalOptimizer>> optimizer =
      FunctionalOptimizer::Create(*kind, hyperparameters, std::move(layouts),
                                  parameters_->backend()->device(),
                                  &parameters_->budget());
  if (!optimizer.ok()) return optimizer.status();
  absl::MutexLock entry_lock(&entry->mutex);
  entry->optimizer = *std::move(optimizer);
  return entry;
}

absl::StatusOr<OptimizerInfo> OptimizerTable::Create(
    const std::string& kind_name,
    const absl::flat_hash_map<std::string, HyperValue>& hyperparameters,
    const std::vector<uint64_t>& parameter_ids) {
  absl::ReaderMutexLock not_during_a_cut(&cut_);
  absl::StatusOr<std::shared_ptr<Entry>> made =
      MakeEntry(kind_name, hyperparameters, parameter_ids);
  if (!made.ok()) return made.status();
  Entry& entry = **made;
  absl::MutexLock entry_lock(&entry.mutex);
  {
    absl::MutexLock lock(&mutex_);
    // Ids are never reused: the last one there is ends them (a restored
    // checkpoint may have used them up).
    if (next_id_ == std::numeric_limits<uint64_t>::max()) {
      return absl::ResourceExhaustedError(
          "no optimizer ids left on this daemon (they are never reused); "
          "expected a new daemon for new optimizers");
    }
    entry.id = next_id_++;
    optimizers_[entry.id] = *made;
  }
  return InfoLocked(entry);
}

namespace {

absl::Status NoSuchOptimizer(uint64_t optimizer_id) {
  return absl::NotFoundError(
      absl::StrCat("optimizer_id: no optimizer with id ", optimizer_id));
}

}  // namespace

absl::StatusOr<std::shared_ptr<OptimizerTable::Entry>> OptimizerTable::Find(
    uint64_t optimizer_id) const {
  absl::MutexLock lock(&mutex_);
  auto it = optimizers_.find(optimizer_id);
  if (it == optimizers_.end()) return NoSuchOptimizer(optimizer_id);
  return it->second;
}

absl::StatusOr<StepResult> OptimizerTable::Step(uint64_t optimizer_id,
                                                uint64_t context_id,
                                                absl::string_view caller) {
  absl::StatusOr<StepResult> result =
      ApplyStep(optimizer_id, context_id, caller);
  if (result.ok() && result->applied && step_observer_ != nullptr) {
    step_observer_();
  }
  return result;
}

absl::StatusOr<StepResult> OptimizerTable::ApplyStep(uint64_t optimizer_id,
                                                     uint64_t context_id,
                                                     absl::string_view caller) {
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(optimizer_id);
  if (!entry.ok()) return entry.status();
  Entry& e = **entry;
  absl::StatusOr<std::shared_ptr<AutogradContext>> context =
      contexts_->Find(context_id, caller);
  if (!context.ok()) {
    // A step applied before a restart, whose reply was lost, is retried
    // with a context that died with the old daemon: the restored record
    // of applied steps answers it, as it would have before the restart.
    absl::MutexLock optimizer_lock(&e.mutex);
    if (absl::IsNotFound(context.status()) && e.applied.contains(context_id)) {
      e.step_metrics->Retried();
      return StepResult();
    }
    e.step_metrics->Failed();  // No such context (or not the caller's).
    return context.status();
  }

  const metrics::Stopwatch timer;
  absl::MutexLock optimizer_lock(&e.mutex);
  const StepMetrics& step_metrics = *e.step_metrics;
  StepResult result;
  if (e.applied.contains(context_id)) {  // A retry.
    step_metrics.Retried();
    return result;
  }

  std::vector<uint64_t> ids;
  for (const auto& parameter : e.parameters) ids.push_back(parameter->id());
  const std::vector<std::optional<Tensor>> gradients =
      (*context)->Gradients(ids);
  std::vector<const Tensor*> grads;
  for (const auto& gradient : gradients) {
    grads.push_back(gradient.has_value() ? &*gradient : nullptr);
  }
  // The parameters locked in id order: deadlock-free across optimizers.
  absl::Status status;
  {
    ParameterUpdate update(e.parameters);
    status = update.CheckNoneDeleted();
    if (status.ok()) status = e.optimizer->Step(update.values(), grads);
    if (status.ok()) {
      update.Commit([&](size_t i) { return grads[i] != nullptr; });
      for (const Tensor* grad : grads) {
        ++(grad == nullptr ? result.skipped_parameters
                           : result.stepped_parameters);
      }
    }
  }
  if (!status.ok()) {
    step_metrics.Failed();
    return status;
  }
  result.applied = true;
  step_metrics.Applied(timer.Seconds(), result.stepped_parameters,
                       result.skipped_parameters);
  // A restored count may be the largest there is: it stays there.
  if (e.steps < std::numeric_limits<int64_t>::max()) ++e.steps;
  e.applied.insert(context_id);
  e.applied_order.push_back(context_id);
  if (e.applied_order.size() > kRememberedSteps) {
    e.applied.erase(e.applied_order.front());
    e.applied_order.pop_front();
  }
  return result;
}

absl::StatusOr<OptimizerInfo> OptimizerTable::Get(uint64_t optimizer_id) const {
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(optimizer_id);
  if (!entry.ok()) return entry.status();
  absl::MutexLock lock(&(*entry)->mutex);
  return InfoLocked(**entry);
}

std::vector<OptimizerInfo> OptimizerTable::List() const {
  std::vector<std::shared_ptr<Entry>> entries;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& item : optimizers_) entries.push_back(item.second);
  }
  std::vector<OptimizerInfo> infos;
  for (const auto& entry : entries) {
    absl::MutexLock lock(&entry->mutex);
    infos.push_back(InfoLocked(*entry));
  }
  return infos;
}

size_t OptimizerTable::size() const {
  absl::MutexLock lock(&mutex_);
  return optimizers_.size();
}

absl::StatusOr<OptimizerInfo> OptimizerTable::SetHyperparameters(
    uint64_t optimizer_id,
    const absl::flat_hash_map<std::string, HyperValue>& changes) {
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(optimizer_id);
  if (!entry.ok()) return entry.status();
  absl::MutexLock lock(&(*entry)->mutex);
  absl::Status status = (*entry)->optimizer->SetHyperparameters(changes);
  if (!status.ok()) return status;
  return InfoLocked(**entry);
}

absl::StatusOr<OptimizerStateDict> OptimizerTable::GetStateDict(
    uint64_t optimizer_id) const {
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(optimizer_id);
  if (!entry.ok()) return entry.status();
  absl::MutexLock lock(&(*entry)->mutex);
  return (*entry)->optimizer->StateDict((*entry)->kind);
}

absl::Status OptimizerTable::LoadStateDict(uint64_t optimizer_id,
                                           const OptimizerStateDict& dict) {
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(optimizer_id);
  if (!entry.ok()) return entry.status();
  absl::MutexLock lock(&(*entry)->mutex);
  return (*entry)->optimizer->LoadStateDict((*entry)->kind, dict);
}

absl::StatusOr<OptimizerInfo> OptimizerTable::Delete(uint64_t optimizer_id) {
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mutex_);
    auto it = optimizers_.find(optimizer_id);
    if (it == optimizers_.end()) return NoSuchOptimizer(optimizer_id);
    entry = it->second;
    optimizers_.erase(it);
  }
  absl::MutexLock lock(&entry->mutex);  // Waits for a step in flight.
  return InfoLocked(*entry);
}

absl::StatusOr<std::vector<OptimizerTable::Saved>> OptimizerTable::Snapshot(
    absl::FunctionRef<absl::Status()> while_stopped,
    std::vector<Saved> recycled) const {
  // No optimizer is made while the cut is taken: its steps would be in
  // the parameters' copy, and it would not be in the checkpoint.
  absl::WriterMutexLock no_new_ones(&cut_);
  std::map<uint64_t, OptimizerStateDict> recycled_by_id;
  for (Saved& one : recycled) {
    recycled_by_id[one.info.id] = std::move(one.state_dict);
  }
  std::vector<std::shared_ptr<Entry>> entries;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& item : optimizers_) entries.push_back(item.second);
  }
  // In id order, as the map is: two snapshots never wait on each other.
  std::vector<std::unique_ptr<absl::MutexLock>> stopped;
  for (const auto& entry : entries) {
    stopped.push_back(std::make_unique<absl::MutexLock>(&entry->mutex));
  }
  std::vector<Saved> saved;
  for (const auto& entry : entries) {
    entry->mutex.AssertHeld();
    Saved one;
    one.info = InfoLocked(*entry);
    one.applied.assign(entry->applied_order.begin(),
                       entry->applied_order.end());
    absl::StatusOr<OptimizerStateDict> dict = entry->optimizer->StateDict(
        entry->kind, std::move(recycled_by_id[entry->id]));
    if (!dict.ok()) return dict.status();
    one.state_dict = *std::move(dict);
    saved.push_back(std::move(one));
  }
  absl::Status status = while_stopped();
  if (!status.ok()) return status;
  return saved;
}

absl::Status OptimizerTable::PrepareSnapshot(
    std::vector<Saved>* recycled) const {
  std::vector<std::shared_ptr<Entry>> entries;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& item : optimizers_) entries.push_back(item.second);
  }
  std::map<uint64_t, OptimizerStateDict> old;
  for (Saved& one : *recycled) old[one.info.id] = std::move(one.state_dict);
  std::vector<Saved> prepared;
  for (const auto& entry : entries) {
    // What state the optimizer has now: names and shapes, by position.
    std::vector<std::pair<int64_t, std::vector<std::pair<std::string, Shape>>>>
        layout;
    {
      absl::MutexLock lock(&entry->mutex);
      const FunctionalOptimizer& optimizer = *entry->optimizer;
      for (size_t i = 0; i < optimizer.parameters().size(); ++i) {
        std::vector<std::pair<std::string, Shape>> buffers;
        for (const auto& [name, buffer] : optimizer.state(i).buffers) {
          buffers.emplace_back(name, buffer.shape());
        }
        if (!buffers.empty()) layout.emplace_back(i, std::move(buffers));
      }
    }
    Saved one;
    one.info.id = entry->id;
    OptimizerStateDict& from = old[entry->id];
    for (const auto& [index, buffers] : layout) {
      OptimizerStateDict::Entry& out = one.state_dict.state[index];
      for (const auto& [name, shape] : buffers) {
        Tensor* reuse = nullptr;
        for (auto& [old_name, old_buffer] : from.state[index].buffers) {
          if (old_name == name && old_buffer.shape() == shape) {
            reuse = &old_buffer;
          }
        }
        if (reuse != nullptr) {
          out.buffers.emplace_back(name, *reuse);
          continue;
        }
        absl::StatusOr<Tensor> tensor =
            Tensor::AllocateHost(DType::kFloat32, shape);
        if (!tensor.ok()) return tensor.status();
        std::memset(tensor->data(), 0, tensor->byte_size());  // Touched now.
        out.buffers.emplace_back(name, *std::move(tensor));
      }
    }
    prepared.push_back(std::move(one));
  }
  *recycled = std::move(prepared);
  return absl::OkStatus();
}

absl::Status OptimizerTable::Restore(std::vector<Saved> saved, uint64_t next_id,
                                     std::vector<std::string>* dropped) {
  std::map<uint64_t, std::shared_ptr<Entry>> made;
  for (Saved& one : saved) {
    const std::string who =
        absl::StrCat("optimizer ", one.info.id, " (", one.info.kind, ")");
    if (one.info.id == 0 || one.info.id >= next_id ||
        made.count(one.info.id) > 0) {
      return absl::DataLossError(
          absl::StrCat(who, ": an id out of order or given twice"));
    }
    if (one.info.steps < 0) {
      return absl::DataLossError(absl::StrCat(who, ": ", one.info.steps,
                                              " steps; expected 0 or more"));
    }
    // A parameter deleted before the save (the optimizer could never step
    // again) leaves the optimizer out, not the checkpoint.
    const auto gone =
        std::find_if(one.info.parameter_ids.begin(),
                     one.info.parameter_ids.end(), [&](uint64_t id) {
                       return absl::IsNotFound(
                           parameters_->Find(ParameterKey::ById(id)).status());
                     });
    if (gone != one.info.parameter_ids.end()) {
      if (dropped != nullptr) {
        dropped->push_back(
            absl::StrCat(who, ": not restored, its parameter ", *gone,
                         " was deleted before the checkpoint was saved"));
      }
      continue;
    }
    if (one.state_dict.param_groups.size() != 1) {
      return absl::DataLossError(
          absl::StrCat(who, ": ", one.state_dict.param_groups.size(),
                       " param groups; expected 1"));
    }
    absl::StatusOr<std::shared_ptr<Entry>> entry =
        MakeEntry(one.info.kind, one.state_dict.param_groups[0].hyperparameters,
                  one.info.parameter_ids);
    if (!entry.ok()) {
      if (absl::IsNotFound(entry.status()) &&
          !kinds_->Find(one.info.kind).ok()) {
        return absl::NotFoundError(
            absl::StrCat(who, " in the checkpoint: ", entry.status().message(),
                         " (load the plugin that adds it)"));
      }
      if (absl::IsResourceExhausted(entry.status())) return entry.status();
      return absl::DataLossError(
          absl::StrCat(who, ": ", entry.status().message()));
    }
    Entry& e = **entry;
    absl::MutexLock lock(&e.mutex);
    absl::Status loaded =
        e.optimizer->LoadStateDict(e.kind, std::move(one.state_dict));
    if (!loaded.ok()) {
      if (absl::IsResourceExhausted(loaded)) return loaded;
      return absl::DataLossError(absl::StrCat(who, ": ", loaded.message()));
    }
    e.id = one.info.id;
    e.steps = one.info.steps;
    for (uint64_t context : one.applied) {
      if (e.applied.insert(context).second) e.applied_order.push_back(context);
    }
    made[e.id] = *std::move(entry);
  }
  absl::MutexLock lock(&mutex_);
  if (!optimizers_.empty()) {
    return absl::FailedPreconditionError(
        "optimizers are restored into an empty table only");
  }
  optimizers_ = std::move(made);
  next_id_ = std::max(next_id_, next_id);
  return absl::OkStatus();
}

uint64_t OptimizerTable::next_id() const {
  absl::MutexLock lock(&mutex_);
  return next_id_;
}

}  // namespace distopt
