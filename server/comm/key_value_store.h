// KeyValueStore: the small store a data-parallel group uses to bootstrap its
// collective backends (gloo's and NCCL's rendezvous), as torch's TCPStore:
// Set, Get, Wait for keys with a timeout, an atomic Add on counters, and
// Delete. Every key and value counts against the daemon's memory budget,
// and the number of keys and of callers waiting at once are bounded, so the
// store cannot be made to grow without limit. Wait gives up when its caller
// cancels and when the store is closed (the daemon is stopping).
// Thread-safe; Wait blocks the caller only.
#ifndef DISTOPT_SERVER_COMM_KEY_VALUE_STORE_H_
#define DISTOPT_SERVER_COMM_KEY_VALUE_STORE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/memory_budget.h"

namespace distopt {

class KeyValueStore {
 public:
  // Longest key and value accepted.
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = size_t{4} << 20;
  // Bookkeeping charged for each key besides its bytes.
  static constexpr uint64_t kEntryOverheadBytes = 64;
  // A group of W ranks keeps a few keys per rank per collective group.
  static constexpr size_t kMaxKeys = 65536;
  // Callers waiting at once: every rank of a large group, with room.
  static constexpr int kMaxWaiters = 1024;

  // Keys and values are charged to `budget` (which must outlive the store);
  // null charges nothing.
  explicit KeyValueStore(MemoryBudget* budget = nullptr) : budget_(budget) {}

  // INVALID_ARGUMENT for an empty or oversized key or value;
  // RESOURCE_EXHAUSTED over the budget or the key count.
  absl::Status Set(const std::string& key, std::string value)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // NOT_FOUND for a key never set.
  absl::StatusOr<std::string> Get(const std::string& key) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Blocks until every key is set: DEADLINE_EXCEEDED naming the keys still
  // missing after `timeout`, CANCELLED as soon as `cancelled` (polled every
  // 50 ms) says so, UNAVAILABLE once the store is closed, RESOURCE_EXHAUSTED
  // when kMaxWaiters callers wait already.
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout,
                    const std::function<bool()>& cancelled = nullptr) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Adds `delta` to the counter at `key` (0 when unset) and returns the new
  // value. INVALID_ARGUMENT when the key holds something not a counter;
  // OUT_OF_RANGE when the sum does not fit 64 bits.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Removes the key; false when it was not set.
  bool Delete(const std::string& key) ABSL_LOCKS_EXCLUDED(mutex_);
  // Ends every Wait in progress and refuses later ones.
  void Close() ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  struct Entry {
    std::string value;
    Reservation reservation;
  };
  absl::Status PutLocked(const std::string& key, std::string value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  MemoryBudget* const budget_;
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, Entry> values_ ABSL_GUARDED_BY(mutex_);
  mutable int waiters_ ABSL_GUARDED_BY(mutex_) = 0;
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_KEY_VALUE_STORE_H_
