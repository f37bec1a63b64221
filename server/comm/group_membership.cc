#include "server/comm/group_membership.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/comm/gloo_communicator.h"
#include "server/comm/peer_probe.h"
#include "server/comm/remote_rendezvous_store.h"

namespace distopt {
namespace {

std::string DaemonKey(int rank) { return absl::StrCat("daemons/", rank); }

}  // namespace

GroupMembership::GroupMembership(const GroupSettings& settings,
                                 KeyValueStore* local_store)
    : rank_(settings.rank),
      world_size_(settings.world_size),
      joiner_([this, settings, local_store] { Join(settings, local_store); }) {}

GroupMembership::~GroupMembership() { StopJoining(); }

void GroupMembership::StopJoining() {
  stopping_ = true;  // A rendezvous still waiting for peers gives up.
  if (joiner_.joinable()) joiner_.join();
}

void GroupMembership::Join(GroupSettings settings, KeyValueStore* local_store) {
  std::unique_ptr<RendezvousStore> store;
  if (settings.rank0_address.empty()) {
    store = std::make_unique<LocalRendezvousStore>(local_store);
  } else {
    store = std::make_unique<RemoteRendezvousStore>(settings.rank0_address);
  }
  // Best effort: without it a lost rank is reported by number only.
  if (!settings.daemon_address.empty()) {
    store->Set(DaemonKey(settings.rank), settings.daemon_address).IgnoreError();
  }
  GlooOptions options;
  options.rank = settings.rank;
  options.size = settings.world_size;
  options.hostname = settings.hostname;
  options.timeout = settings.timeout;
  options.cancelled = [this] { return stopping_.load(); };
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      CreateGlooCommunicator(options, store.get());
  absl::MutexLock lock(&mutex_);
  store_ = std::move(store);
  gloo_options_ = options;
  if (communicator.ok()) {
    communicator_ = *std::move(communicator);
    state_ = State::kReady;
  } else {
    error_ = communicator.status();
    state_ = State::kFailed;
  }
}

GroupMembership::State GroupMembership::state() const {
  absl::MutexLock lock(&mutex_);
  return state_;
}

absl::Status GroupMembership::error() const {
  absl::MutexLock lock(&mutex_);
  return error_;
}

absl::Status GroupMembership::Run(
    absl::Duration timeout,
    const std::function<absl::Status(Communicator&)>& collective) {
  return RunInGroup(timeout, [&](CommunicatorGroup& group) {
    return collective(group.global());
  });
}

absl::Status GroupMembership::RunInGroup(
    absl::Duration timeout,
    const std::function<absl::Status(CommunicatorGroup&)>& collective) {
  Communicator* communicator = nullptr;
  RendezvousStore* store = nullptr;
  GlooOptions options;
  {
    absl::MutexLock lock(&mutex_);
    absl::Status ready = AwaitReadyLocked(timeout);
    if (!ready.ok()) return ready;
    communicator = communicator_.get();
    store = store_.get();
    options = gloo_options_;
  }
  absl::MutexLock serial(&collective_mutex_);
  if (group_ == nullptr) {
    group_ =
        std::make_unique<GlooCommunicatorGroup>(communicator, options, store);
  }
  absl::Status status = collective(*group_);
  if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) {
    return NameLostRanks(status);
  }
  return status;
}

absl::Status GroupMembership::AwaitReadyLocked(absl::Duration timeout) {
  auto joined = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return state_ != State::kJoining;
  };
  mutex_.AwaitWithTimeout(absl::Condition(&joined), timeout);
  if (state_ == State::kJoining) {
    return absl::UnavailableError(
        "group: still waiting for the other ranks to join");
  }
  if (state_ == State::kFailed) {
    return absl::FailedPreconditionError(
        absl::StrCat("group: joining failed: ", error_.message()));
  }
  return absl::OkStatus();
}

absl::Status GroupMembership::Publish(const std::string& key,
                                      const std::string& value) {
  RendezvousStore* store = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    absl::Status ready = AwaitReadyLocked(absl::ZeroDuration());
    if (!ready.ok()) return ready;
    store = store_.get();
  }
  return store->Set(key, value);
}

absl::StatusOr<std::string> GroupMembership::Lookup(const std::string& key,
                                                    absl::Duration timeout) {
  RendezvousStore* store = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    absl::Status ready = AwaitReadyLocked(absl::ZeroDuration());
    if (!ready.ok()) return ready;
    store = store_.get();
  }
  return store->Get(key, timeout);
}

absl::StatusOr<int> GroupMembership::RanksOnThisHost(absl::Duration timeout) {
  RendezvousStore* store = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    absl::Status ready = AwaitReadyLocked(timeout);
    if (!ready.ok()) return ready;
    store = store_.get();
  }
  auto host_of = [](const std::string& address) {
    return address.substr(0, address.rfind(':'));
  };
  std::vector<std::string> hosts;
  for (int r = 0; r < world_size_; ++r) {
    absl::StatusOr<std::string> address =
        store->Get(DaemonKey(r), absl::Seconds(1));
    if (!address.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "group: rank ", r, " published no address (",
          address.status().message(), "); expected an explicit subgroup size"));
    }
    hosts.push_back(host_of(*address));
  }
  std::vector<int> mine;
  for (int r = 0; r < world_size_; ++r) {
    if (hosts[r] == hosts[rank_]) mine.push_back(r);
  }
  const int size = static_cast<int>(mine.size());
  const bool aligned = world_size_ % size == 0 && mine.front() % size == 0 &&
                       mine.back() - mine.front() + 1 == size;
  if (!aligned) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group: the ranks on host ", hosts[rank_],
        " are not one aligned block of contiguous ranks; expected an "
        "explicit subgroup size"));
  }
  return size;
}

absl::Status GroupMembership::NameLostRanks(const absl::Status& failure) {
  RendezvousStore* store = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    store = store_.get();
  }
  std::string lost;
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    // The store is rank 0's: if rank 0 is gone, so is the address book.
    absl::StatusOr<std::string> address =
        store->Get(DaemonKey(r), absl::Seconds(1));
    if (address.ok() && AcceptsConnections(*address, absl::Seconds(1))) {
      continue;
    }
    absl::StrAppend(&lost, lost.empty() ? "" : ", ", "rank ", r,
                    address.ok() ? absl::StrCat(" (", *address, ")") : "");
  }
  const std::string verdict =
      lost.empty() ? "every other rank still accepts connections"
                   : absl::StrCat("lost: ", lost, " no longer answers");
  return absl::Status(failure.code(),
                      absl::StrCat(failure.message(), "; ", verdict));
}

}  // namespace distopt
