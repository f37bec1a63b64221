#include "server/comm/key_value_store.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/quoted.h"

namespace distopt {
namespace {

absl::Status ValidateKey(const std::string& key) {
  if (key.empty() || key.size() > KeyValueStore::kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key: ", key.size(), " bytes; expected 1 to ",
                     KeyValueStore::kMaxKeyBytes));
  }
  return absl::OkStatus();
}

// How often a waiting caller checks whether it was cancelled.
constexpr absl::Duration kCancellationPoll = absl::Milliseconds(50);

}  // namespace

absl::Status KeyValueStore::PutLocked(const std::string& key,
                                      std::string value) {
  auto it = values_.find(key);
  if (it == values_.end() && values_.size() >= kMaxKeys) {
    return absl::ResourceExhaustedError(
        absl::StrCat("key: the store holds ", values_.size(),
                     " keys; expected at most ", kMaxKeys));
  }
  Reservation reservation;
  if (budget_ != nullptr) {
    absl::StatusOr<Reservation> reserved = budget_->ReserveTotal(
        key.size() + value.size() + kEntryOverheadBytes,
        absl::StrCat("the group store's key ", Quoted(key)));
    if (!reserved.ok()) return reserved.status();
    reservation = *std::move(reserved);
  }
  // The old value's reservation goes with it.
  values_[key] = Entry{std::move(value), std::move(reservation)};
  return absl::OkStatus();
}

absl::Status KeyValueStore::Set(const std::string& key, std::string value) {
  absl::Status status = ValidateKey(key);
  if (!status.ok()) return status;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value: ", value.size(), " bytes; expected at most ", kMaxValueBytes));
  }
  absl::MutexLock lock(&mutex_);
  return PutLocked(key, std::move(value));
}

absl::StatusOr<std::string> KeyValueStore::Get(const std::string& key) const {
  absl::Status status = ValidateKey(key);
  if (!status.ok()) return status;
  absl::MutexLock lock(&mutex_);
  auto it = values_.find(key);
  if (it == values_.end()) {
    return absl::NotFoundError(
        absl::StrCat("key: ", Quoted(key), " is not set"));
  }
  return it->second.value;
}

absl::Status KeyValueStore::Wait(const std::vector<std::string>& keys,
                                 absl::Duration timeout,
                                 const std::function<bool()>& cancelled) const {
  for (const std::string& key : keys) {
    absl::Status status = ValidateKey(key);
    if (!status.ok()) return status;
  }
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mutex_);
  if (waiters_ >= kMaxWaiters) {
    return absl::ResourceExhaustedError(
        absl::StrCat("keys: ", waiters_,
                     " callers wait on the store already; "
                     "expected at most ",
                     kMaxWaiters));
  }
  ++waiters_;
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (closed_) return true;
    for (const std::string& key : keys) {
      if (!values_.contains(key)) return false;
    }
    return true;
  };
  absl::Status result;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (mutex_.AwaitWithTimeout(absl::Condition(&done),
                                std::min(left, kCancellationPoll))) {
      if (closed_) {
        result = absl::UnavailableError(
            "keys: the daemon is stopping; its store is closed");
      }
      break;
    }
    if (cancelled && cancelled()) {
      result = absl::CancelledError("keys: the caller cancelled the wait");
      break;
    }
    if (absl::Now() >= deadline) {
      std::vector<std::string> missing;
      for (const std::string& key : keys) {
        if (!values_.contains(key)) missing.push_back(Quoted(key));
      }
      result = absl::DeadlineExceededError(
          absl::StrCat("keys: ", absl::StrJoin(missing, ", "),
                       " not set within ", absl::FormatDuration(timeout)));
      break;
    }
  }
  --waiters_;
  return result;
}

absl::StatusOr<int64_t> KeyValueStore::Add(const std::string& key,
                                           int64_t delta) {
  absl::Status status = ValidateKey(key);
  if (!status.ok()) return status;
  absl::MutexLock lock(&mutex_);
  int64_t value = 0;
  auto it = values_.find(key);
  if (it != values_.end() && !absl::SimpleAtoi(it->second.value, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key: ", Quoted(key),
                     " holds a value that is not a counter; expected a "
                     "key used only with Add"));
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    return absl::OutOfRangeError(absl::StrCat(
        "delta: ", value, " + ", delta, " does not fit a 64-bit counter"));
  }
  status = PutLocked(key, absl::StrCat(sum));
  if (!status.ok()) return status;
  return sum;
}

bool KeyValueStore::Delete(const std::string& key) {
  absl::MutexLock lock(&mutex_);
  return values_.erase(key) != 0;
}

void KeyValueStore::Close() {
  absl::MutexLock lock(&mutex_);
  closed_ = true;
}

}  // namespace distopt
