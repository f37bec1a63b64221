#include "server/autograd/context_table.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics.h"
#include "common/page_after.h"

namespace distopt {

namespace {

absl::Status NotTheOwner(uint64_t id) {
  return absl::PermissionDeniedError(absl::StrCat(
      "context_id: context ", id,
      " belongs to another client identity; expected the identity that "
      "made it"));
}

}  // namespace

absl::Status ValidateContextId(uint64_t id, absl::string_view field) {
  if (id != 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field,
      ": 0 is not a context id; expected (client id << 48) | counter "
      "with a counter from 1"));
}

namespace {

// Contexts by how they began and ended, for /metrics.
struct ContextCounters {
  prometheus::Counter& created;
  prometheus::Counter& released;
  prometheus::Counter& collected;
};

const ContextCounters& Counters() {
  static const ContextCounters* const counters = [] {
    auto& family = metrics::CounterFamily(
        "distopt_autograd_context_events_total",
        "Autograd contexts created, released by their client, and collected "
        "after --context_ttl idle");
    return new ContextCounters{
        metrics::CounterWith(family, {{"event", "created"}}),
        metrics::CounterWith(family, {{"event", "released"}}),
        metrics::CounterWith(family, {{"event", "collected"}})};
  }();
  return *counters;
}

}  // namespace

ContextTable::ContextTable(absl::Duration time_to_live, MemoryBudget* budget,
                           std::function<absl::Time()> clock)
    : time_to_live_(time_to_live), budget_(budget), clock_(std::move(clock)) {
  Counters();  // Registered at 0, not at the first event.
}

size_t ContextTable::size() const {
  absl::MutexLock lock(&mutex_);
  return contexts_.size();
}

absl::StatusOr<std::shared_ptr<AutogradContext>> ContextTable::GetOrCreate(
    uint64_t id, absl::string_view caller, bool* created) {
  absl::Status valid = ValidateContextId(id, "context_id");
  if (!valid.ok()) return valid;
  const absl::Time now = clock_();
  absl::MutexLock lock(&mutex_);
  if (created != nullptr) *created = false;
  auto it = contexts_.find(id);
  if (it != contexts_.end()) {
    if (it->second->owner() != caller) return NotTheOwner(id);
    it->second->Touch(now);
    return it->second;
  }
  absl::StatusOr<Reservation> reservation = budget_->ReserveTotal(
      kContextOverheadBytes, absl::StrCat("autograd context ", id));
  if (!reservation.ok()) return reservation.status();
  auto context = std::make_shared<AutogradContext>(
      id, now, *std::move(reservation), std::string(caller));
  contexts_.emplace(id, context);
  if (created != nullptr) *created = true;
  metrics::Add(Counters().created);
  return context;
}

void ContextTable::ReleaseIfUnused(
    const std::shared_ptr<AutogradContext>& context) {
  absl::MutexLock lock(&mutex_);
  auto it = contexts_.find(context->id());
  // Copies are made under this lock only: nobody can take one meanwhile.
  // Two holders are the table and the caller.
  if (it != contexts_.end() && it->second == context &&
      context.use_count() == 2 && context->empty()) {
    contexts_.erase(it);
    metrics::Add(Counters().released);
  }
}

absl::StatusOr<std::shared_ptr<AutogradContext>> ContextTable::Find(
    uint64_t id, absl::string_view caller) const {
  absl::Status valid = ValidateContextId(id, "context_id");
  if (!valid.ok()) return valid;
  const absl::Time now = clock_();
  absl::MutexLock lock(&mutex_);
  auto it = contexts_.find(id);
  if (it == contexts_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "context_id: no autograd context ", id,
        " on this worker (never used here, released, or collected after "
        "being idle)"));
  }
  if (it->second->owner() != caller) return NotTheOwner(id);
  it->second->Touch(now);
  return it->second;
}

absl::StatusOr<bool> ContextTable::Release(uint64_t id,
                                           absl::string_view caller) {
  absl::MutexLock lock(&mutex_);
  auto it = contexts_.find(id);
  if (it == contexts_.end()) return false;
  if (it->second->owner() != caller) return NotTheOwner(id);
  contexts_.erase(it);
  metrics::Add(Counters().released);
  return true;
}

ContextPage ContextTable::List(uint64_t after_id, size_t limit,
                               absl::string_view caller) const {
  IdPage<std::shared_ptr<AutogradContext>> selected;
  {
    absl::MutexLock lock(&mutex_);
    selected = PageAfter(contexts_, after_id, limit, [&](const auto& context) {
      return context->owner() == caller;
    });
  }
  // Each context's figures under its own lock, not the table's.
  ContextPage page;
  page.next_after_id = selected.next_after_id;
  for (const auto& context : selected.values) {
    page.contexts.push_back(context->Info());
  }
  return page;
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
  metrics::Add(Counters().collected, static_cast<double>(collected));
  return collected;
}

}  // namespace distopt
