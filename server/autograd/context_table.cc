#include "server/autograd/context_table.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace distopt {

absl::Status ValidateContextId(uint64_t id, absl::string_view field) {
  if (id != 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field,
      ": 0 is not a context id; expected (client id << 48) | counter "
      "with a counter from 1"));
}

ContextTable::ContextTable(absl::Duration time_to_live,
                           std::function<absl::Time()> clock)
    : time_to_live_(time_to_live), clock_(std::move(clock)) {}

std::shared_ptr<AutogradContext> ContextTable::GetOrCreate(uint64_t id) {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mutex_);
  std::shared_ptr<AutogradContext>& context = contexts_[id];
  if (context == nullptr) {
    context = std::make_shared<AutogradContext>(id, now);
  } else {
    context->Touch(now);
  }
  return context;
}

absl::StatusOr<std::shared_ptr<AutogradContext>> ContextTable::Find(
    uint64_t id) const {
  absl::MutexLock lock(&mutex_);
  auto it = contexts_.find(id);
  if (it == contexts_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "context_id: no autograd context ", id,
        " on this worker (never used here, released, or collected after "
        "being idle)"));
  }
  it->second->Touch(clock_());
  return it->second;
}

bool ContextTable::Release(uint64_t id) {
  absl::MutexLock lock(&mutex_);
  return contexts_.erase(id) != 0;
}

std::vector<ContextInfo> ContextTable::List() const {
  std::vector<std::shared_ptr<AutogradContext>> contexts;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& entry : contexts_) contexts.push_back(entry.second);
  }
  std::vector<ContextInfo> infos;
  for (const auto& context : contexts) infos.push_back(context->Info());
  return infos;
}

size_t ContextTable::CollectIdle(absl::Time now) {
  absl::MutexLock lock(&mutex_);
  size_t collected = 0;
  for (auto it = contexts_.begin(); it != contexts_.end();) {
    if (now - it->second->last_used() > time_to_live_) {
      it = contexts_.erase(it);
      ++collected;
    } else {
      ++it;
    }
  }
  return collected;
}

}  // namespace distopt
