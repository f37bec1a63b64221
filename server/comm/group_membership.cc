#include "server/comm/group_membership.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/comm/gloo_communicator.h"
#include "server/comm/remote_rendezvous_store.h"

namespace distopt {

GroupMembership::GroupMembership(const GroupSettings& settings,
                                 KeyValueStore* local_store)
    : joiner_([this, settings, local_store] { Join(settings, local_store); }) {}

GroupMembership::~GroupMembership() {
  stopping_ = true;  // A rendezvous still waiting for peers gives up.
  joiner_.join();
}

void GroupMembership::Join(GroupSettings settings, KeyValueStore* local_store) {
  std::unique_ptr<RendezvousStore> store;
  if (settings.rank0_address.empty()) {
    store = std::make_unique<LocalRendezvousStore>(local_store);
  } else {
    store = std::make_unique<RemoteRendezvousStore>(settings.rank0_address);
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
  Communicator* communicator = nullptr;
  {
    absl::MutexLock lock(&mutex_);
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
    communicator = communicator_.get();
  }
  absl::MutexLock serial(&collective_mutex_);
  return collective(*communicator);
}

}  // namespace distopt
