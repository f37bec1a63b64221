// KeyValueStore: the small store a data-parallel group uses to bootstrap its
// collective backends (gloo's and NCCL's rendezvous), as torch's TCPStore:
// Set, Get, Wait for keys with a timeout, and an atomic Add on counters.
// Thread-safe; Wait blocks the caller only.
#ifndef DISTOPT_SERVER_COMM_KEY_VALUE_STORE_H_
#define DISTOPT_SERVER_COMM_KEY_VALUE_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace distopt {

class KeyValueStore {
 public:
  // Longest key and value accepted.
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = size_t{4} << 20;

  // INVALID_ARGUMENT for an empty or oversized key or value.
  absl::Status Set(const std::string& key, std::string value)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // NOT_FOUND for a key never set.
  absl::StatusOr<std::string> Get(const std::string& key) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Blocks until every key is set, or DEADLINE_EXCEEDED after `timeout`
  // naming the keys still missing.
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mutex_);
  // Adds `delta` to the counter at `key` (0 when unset) and returns the new
  // value. INVALID_ARGUMENT when the key holds something not a counter.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta)
      ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_KEY_VALUE_STORE_H_
