// RendezvousStore: the tiny store interface the collective backends
// bootstrap through (as gloo's rendezvous::Store): set a key, get a key
// once it is set, wait for keys. Implementations: the daemon's own
// KeyValueStore (LocalRendezvousStore) and, across daemons, rank 0's
// GroupService.
#ifndef DISTOPT_SERVER_COMM_RENDEZVOUS_STORE_H_
#define DISTOPT_SERVER_COMM_RENDEZVOUS_STORE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/comm/key_value_store.h"

namespace distopt {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  virtual absl::Status Set(const std::string& key,
                           const std::string& value) = 0;
  // Waits up to `timeout` for the key, then returns its value.
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          absl::Duration timeout) = 0;
  // DEADLINE_EXCEEDED naming the missing keys after `timeout`.
  virtual absl::Status Wait(const std::vector<std::string>& keys,
                            absl::Duration timeout) = 0;
  // Removes the key (nothing when it is not set).
  virtual absl::Status Delete(const std::string& key) = 0;
};

// A RendezvousStore over a KeyValueStore in this process. Thread-safe.
class LocalRendezvousStore : public RendezvousStore {
 public:
  explicit LocalRendezvousStore(KeyValueStore* store) : store_(store) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    return store_->Set(key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override {
    absl::Status status = store_->Wait({key}, timeout);
    if (!status.ok()) return status;
    return store_->Get(key);
  }
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override {
    return store_->Wait(keys, timeout);
  }
  absl::Status Delete(const std::string& key) override {
    store_->Delete(key);
    return absl::OkStatus();
  }

 private:
  KeyValueStore* const store_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_RENDEZVOUS_STORE_H_
