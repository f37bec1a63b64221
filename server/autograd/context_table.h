// ContextTable: the distributed autograd contexts alive on this daemon.
//
// A context belongs to the client identity that made it (its certificate's
// identity under mutual TLS; "" otherwise, when every client shares every
// context): another identity gets PERMISSION_DENIED for it, and sees only
// its own in listings.
//
// A context is created by the first call that names it and lives until it
// is released or, when a crashed trainer never releases it, until it has
// been idle longer than the table's time-to-live (CollectIdle). Context ids
// are 64 bits: the creating client's 16-bit id above a 48-bit counter; 0 is
// not an id. Thread-safe.
#ifndef DISTOPT_SERVER_AUTOGRAD_CONTEXT_TABLE_H_
#define DISTOPT_SERVER_AUTOGRAD_CONTEXT_TABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/memory_budget.h"
#include "server/autograd/context.h"

namespace distopt {

// INVALID_ARGUMENT naming `field` for id 0 (GetOrCreate and Find check it).
absl::Status ValidateContextId(uint64_t id, absl::string_view field);

struct ContextPage {
  std::vector<ContextInfo> contexts;  // In increasing id order.
  // Id to continue after; nullopt when there are no more.
  std::optional<uint64_t> next_after_id;
};

class ContextTable {
 public:
  // The bookkeeping of one context (its maps, records and locks), charged
  // to the budget when it is made: the daemon's RSS grew by about 1.1 KiB
  // per context holding one small gradient (65,280 of them: +74 MB).
  static constexpr uint64_t kContextOverheadBytes = 1280;

  // Contexts and what they hold are charged to `budget`, which must outlive
  // the table. `clock` tells the time (tests pass a fake one).
  ContextTable(absl::Duration time_to_live, MemoryBudget* budget,
               std::function<absl::Time()> clock = absl::Now);

  // The context `id`, created now if it does not exist yet (`created` says
  // which). RESOURCE_EXHAUSTED when a new one does not fit the budget.
  absl::StatusOr<std::shared_ptr<AutogradContext>> GetOrCreate(
      uint64_t id, absl::string_view caller = "", bool* created = nullptr)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Releases `context` if it holds nothing and no other call holds it: for
  // a call that created it and was then refused, so that a refusal leaves
  // nothing behind (a call that found it meanwhile keeps it).
  void ReleaseIfUnused(const std::shared_ptr<AutogradContext>& context)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // NOT_FOUND when this daemon has no context `id`.
  absl::StatusOr<std::shared_ptr<AutogradContext>> Find(
      uint64_t id, absl::string_view caller = "") const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Frees the context; false (and no error) when it is unknown here.
  absl::StatusOr<bool> Release(uint64_t id, absl::string_view caller = "")
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Contexts with ids above `after_id`, at most `limit`, in id order.
  // Only `caller`'s contexts.
  ContextPage List(uint64_t after_id, size_t limit,
                   absl::string_view caller = "") const
      ABSL_LOCKS_EXCLUDED(mutex_);

  // Releases contexts idle since before `now - time_to_live`; returns how
  // many.
  size_t CollectIdle(absl::Time now) ABSL_LOCKS_EXCLUDED(mutex_);
  // Contexts alive.
  size_t size() const ABSL_LOCKS_EXCLUDED(mutex_);

  absl::Duration time_to_live() const { return time_to_live_; }

 private:
  const absl::Duration time_to_live_;
  MemoryBudget* const budget_;
  const std::function<absl::Time()> clock_;
  mutable absl::Mutex mutex_;
  std::map<uint64_t, std::shared_ptr<AutogradContext>> contexts_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_AUTOGRAD_CONTEXT_TABLE_H_
