#include "server/comm/key_value_store.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

}  // namespace

absl::Status KeyValueStore::Set(const std::string& key, std::string value) {
  absl::Status status = ValidateKey(key);
  if (!status.ok()) return status;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value: ", value.size(), " bytes; expected at most ", kMaxValueBytes));
  }
  absl::MutexLock lock(&mutex_);
  values_[key] = std::move(value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> KeyValueStore::Get(const std::string& key) const {
  absl::Status status = ValidateKey(key);
  if (!status.ok()) return status;
  absl::MutexLock lock(&mutex_);
  auto it = values_.find(key);
  if (it == values_.end()) {
    return absl::NotFoundError(absl::StrCat("key: \"", key, "\" is not set"));
  }
  return it->second;
}

absl::Status KeyValueStore::Wait(const std::vector<std::string>& keys,
                                 absl::Duration timeout) const {
  for (const std::string& key : keys) {
    absl::Status status = ValidateKey(key);
    if (!status.ok()) return status;
  }
  absl::MutexLock lock(&mutex_);
  auto all_set = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    for (const std::string& key : keys) {
      if (!values_.contains(key)) return false;
    }
    return true;
  };
  if (mutex_.AwaitWithTimeout(absl::Condition(&all_set), timeout)) {
    return absl::OkStatus();
  }
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!values_.contains(key)) missing.push_back(key);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("keys: ", absl::StrJoin(missing, ", "), " not set within ",
                   absl::FormatDuration(timeout)));
}

absl::StatusOr<int64_t> KeyValueStore::Add(const std::string& key,
                                           int64_t delta) {
  absl::Status status = ValidateKey(key);
  if (!status.ok()) return status;
  absl::MutexLock lock(&mutex_);
  int64_t value = 0;
  auto it = values_.find(key);
  if (it != values_.end() && !absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key: \"", key,
                     "\" holds a value that is not a counter; expected a "
                     "key used only with Add"));
  }
  value += delta;
  values_[key] = absl::StrCat(value);
  return value;
}

}  // namespace distopt
