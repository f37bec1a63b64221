#include "server/comm/group_membership.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/quoted.h"
#include "server/comm/etcd_rendezvous_store.h"
#include "server/comm/forwarding_communicator.h"
#include "server/comm/gloo_communicator.h"
#include "server/comm/peer_probe.h"
#include "server/comm/remote_rendezvous_store.h"
#include "server/comm/tensor_communicators.h"

namespace distopt {
namespace {

// Far more rounds than a group re-forms in its life (one per failure).
constexpr int64_t kMaxRound = int64_t{1} << 40;

// How a failed re-form starts its message, after what broke the round.
constexpr absl::string_view kReformFailed = "re-forming the group as round ";

// What broke the round, without the failed re-forms since: each failed
// group call would otherwise add one more to the message (and to every
// refusal and log line that quotes it), without end.
absl::string_view CauseOf(absl::string_view message) {
  const size_t reform = message.find(absl::StrCat("; ", kReformFailed));
  return reform == absl::string_view::npos ? message
                                           : message.substr(0, reform);
}

std::string DaemonKey(int rank) { return absl::StrCat("daemons/", rank); }

// Where round `round`'s gloo rendezvous keeps its keys.
std::string RoundPrefix(int64_t round) {
  return absl::StrCat("gloo/round", round);
}

// The --world_size rank `rank` was started with.
std::string WorldSizeKey(int rank) {
  return absl::StrCat("world_sizes/", rank);
}

// The last round rank `rank` connected, for the ranks that re-form.
std::string RoundKey(int rank) { return absl::StrCat("rounds/", rank); }

// Rank r's daemon address, as the store holds it: a value that is not an
// address (another writer's, under etcd) is quoted (escaped and cut), as
// it goes into GetGroup, errors and logs.
absl::StatusOr<std::string> DaemonAddressOf(RendezvousStore& store, int r,
                                            absl::Duration timeout) {
  absl::StatusOr<std::string> value = store.Get(DaemonKey(r), timeout);
  if (!value.ok()) return value;
  const bool address_like =
      !value->empty() && value->size() <= 256 &&
      std::all_of(value->begin(), value->end(),
                  [](char c) { return c > ' ' && c < 0x7f; });
  return address_like ? *value : Quoted(*value);
}

// The daemon that serves rank `rank` now (see Incarnation).
std::string IncarnationKey(int rank) {
  return absl::StrCat("incarnations/", rank);
}

// Tells one daemon of a rank from the next: its address, pid and start.
std::string Incarnation(const std::string& address) {
  return absl::StrCat(address, " pid ", getpid(), " started ",
                      absl::ToUnixNanos(absl::Now()));
}

}  // namespace

// The group's communicator across rounds: forwards to the current round's,
// sets each collective's timeout, and notes whether a collective of the
// call in progress succeeded (a call whose first collective failed changed
// nothing and may run again on a new round). Used under the membership's
// collective lock only.
class RoundCommunicator : public ForwardingCommunicator {
 public:
  RoundCommunicator(int rank, int size)
      : rank_(rank), size_(size), tensors_(this) {}

  void Reset(std::unique_ptr<Communicator> round) { round_ = std::move(round); }
  void BeginCall() { succeeded_ = false; }
  bool succeeded() const { return succeeded_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void SetTimeout(absl::Duration timeout) override {
    if (round_ != nullptr) round_->SetTimeout(timeout);
  }
  // The round's tensors' communicator, as stable across rounds as this.
  Communicator& tensors() override { return tensors_; }
  int64_t kept_bytes() const override {
    return round_ == nullptr ? 0 : round_->kept_bytes();
  }

 private:
  class RoundTensors : public ForwardingCommunicator {
   public:
    explicit RoundTensors(RoundCommunicator* round) : round_(round) {}
    int rank() const override { return round_->rank(); }
    int size() const override { return round_->size(); }
    // The daemon's device does not change from round to round.
    Device device() const override {
      return round_->round_ == nullptr ? Device::Cpu()
                                       : round_->round_->tensors().device();
    }
    void SetTimeout(absl::Duration timeout) override {
      round_->SetTimeout(timeout);
    }
    int64_t kept_bytes() const override {
      return round_->round_ == nullptr ? 0
                                       : round_->round_->tensors().kept_bytes();
    }

   private:
    absl::Status Forward(
        absl::FunctionRef<absl::Status(Communicator&)> call) override {
      return round_->Forward(
          [&](Communicator& current) { return call(current.tensors()); });
    }

    RoundCommunicator* const round_;
  };

  absl::Status Forward(
      absl::FunctionRef<absl::Status(Communicator&)> call) override {
    if (round_ == nullptr) {
      return absl::FailedPreconditionError(
          "group: no communicator (the group has not joined)");
    }
    absl::Status status = call(*round_);
    if (status.ok()) succeeded_ = true;
    return status;
  }

  const int rank_;
  const int size_;
  std::unique_ptr<Communicator> round_;
  bool succeeded_ = false;
  RoundTensors tensors_;
};

GroupMembership::GroupMembership(const GroupSettings& settings,
                                 KeyValueStore* local_store)
    : rank_(settings.rank),
      world_size_(settings.world_size),
      etcd_(!settings.etcd_rendezvous.empty()),
      incarnation_(Incarnation(settings.daemon_address)),
      on_ready_changed_(settings.on_ready_changed),
      global_(std::make_unique<RoundCommunicator>(settings.rank,
                                                  settings.world_size)),
      joiner_([this, settings, local_store] { Join(settings, local_store); }) {}

GroupMembership::~GroupMembership() { StopJoining(); }

void GroupMembership::StopJoining() {
  stopping_ = true;  // A rendezvous still waiting for peers gives up.
  if (joiner_.joinable()) joiner_.join();
}

void GroupMembership::SetState(State state, absl::Status error) {
  {
    absl::MutexLock lock(&mutex_);
    state_ = state;
    error_ = std::move(error);
    // A group ready again (a new round) has lost nobody.
    if (state == State::kReady) lost_ranks_.clear();
  }
  if (on_ready_changed_) on_ready_changed_(state == State::kReady);
}

void GroupMembership::Join(GroupSettings settings, KeyValueStore* local_store) {
  {
    absl::MutexLock lock(&mutex_);
    settings_ = settings;
    local_store_ = local_store;
  }
  // Calls wait for joining on mutex_, not on this lock.
  absl::MutexLock collective(&collective_mutex_);
  absl::Status opened = OpenStoreLocked();
  if (!opened.ok()) {
    SetState(State::kFailed, opened);
    return;
  }
  RendezvousStore* store = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    store = store_.get();
  }
  if (!etcd()) {
    absl::Status fresh = CheckNotARestart(*store);
    if (!fresh.ok()) {
      SetState(State::kFailed, fresh);
      return;
    }
  }
  // In etcd the group may be older than this daemon (a replacement): it
  // joins the round after the highest reached, which the other ranks
  // re-form as. Rank 0's store is as new as the group.
  const int64_t first = etcd() ? HighestRound(*store) + 1 : 0;
  absl::Status connected = ConnectLocked(first, settings.timeout);
  {
    absl::MutexLock lock(&mutex_);
    joined_ = connected.ok();
    // A rank that did not connect re-forms as `first` again.
    round_ = connected.ok() ? first : std::max<int64_t>(0, first - 1);
  }
  if (connected.ok()) NoteMembersLocked(first);
  SetState(connected.ok() ? State::kReady : State::kFailed, connected);
}

absl::Status GroupMembership::OpenStoreLocked() {
  GroupSettings settings;
  KeyValueStore* local_store = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    if (store_ != nullptr) return absl::OkStatus();
    settings = settings_;
    local_store = local_store_;
  }
  std::unique_ptr<RendezvousStore> store;
  if (etcd()) {
    absl::StatusOr<EtcdRendezvous> where =
        ParseEtcdUrl(settings.etcd_rendezvous, "--rendezvous");
    if (!where.ok()) return where.status();
    auto in_etcd = std::make_unique<EtcdRendezvousStore>(
        std::make_shared<EtcdClient>(where->endpoint), *where);
    absl::StatusOr<std::unique_ptr<EtcdRankClaim>> claim =
        EtcdRankClaim::Acquire(*in_etcd, settings.rank, settings.daemon_address,
                               settings.rank_hold_ttl, settings.timeout,
                               [this] { return stopping_.load(); });
    if (!claim.ok()) return claim.status();
    // Who serves this rank now: the other ranks tell a replacement by it.
    absl::Status published =
        in_etcd->Set(IncarnationKey(settings.rank), incarnation_);
    if (!published.ok()) return published;
    (*claim)->WhenTakenAgain([this] { return PublishAgain(); });
    claim_ = *std::move(claim);
    store = std::move(in_etcd);
  } else if (settings.rank0_address.empty()) {
    store = std::make_unique<LocalRendezvousStore>(local_store);
  } else {
    store = std::make_unique<RemoteRendezvousStore>(settings.rank0_address,
                                                    settings.secret);
  }
  // Best effort: without it a lost rank is reported by number only.
  if (!settings.daemon_address.empty()) {
    store->Set(DaemonKey(settings.rank), settings.daemon_address).IgnoreError();
  }
  absl::MutexLock lock(&mutex_);
  store_ = std::move(store);
  return absl::OkStatus();
}

bool GroupMembership::PublishAgain() {
  RendezvousStore* store = nullptr;
  GroupSettings settings;
  int64_t round = -1;
  {
    absl::MutexLock lock(&mutex_);
    store = store_.get();
    settings = settings_;
    round = reached_round_;
  }
  if (store == nullptr) return false;
  // Without them a replacement of another rank would start at round 0
  // while this rank re-forms at its next, and neither could tell the other
  // was replaced: both would stay FAILED until Reform on every rank.
  absl::Status published =
      store->Set(IncarnationKey(settings.rank), incarnation_);
  if (published.ok() && !settings.daemon_address.empty()) {
    published = store->Set(DaemonKey(settings.rank), settings.daemon_address);
  }
  if (published.ok()) {
    published =
        store->Set(WorldSizeKey(settings.rank), absl::StrCat(world_size_));
  }
  if (published.ok() && round >= 0) {
    published = store->Set(RoundKey(settings.rank), absl::StrCat(round));
  }
  if (published.ok()) {
    log::Warning("this rank's keys were written to etcd again",
                 {{"rank", settings.rank}, {"round", round}});
  } else {
    log::Warning(
        "writing this rank's keys to etcd again failed (tried "
        "again at the next renewal)",
        {{"rank", settings.rank}, {"error", published.message()}});
  }
  return published.ok();
}

int64_t GroupMembership::HighestRound(RendezvousStore& store) const {
  int64_t highest = -1;
  for (int r = 0; r < world_size_; ++r) {
    absl::StatusOr<std::string> reached =
        store.Get(RoundKey(r), absl::Milliseconds(1));
    int64_t round = 0;
    // Only what a rank could have written counts: a value someone else
    // put in etcd must not make the next round overflow.
    if (reached.ok() && absl::SimpleAtoi(*reached, &round) && round >= 0 &&
        round <= kMaxRound) {
      highest = std::max(highest, round);
    }
  }
  return highest;
}

absl::Status GroupMembership::CheckNotARestart(RendezvousStore& store) const {
  // Rank 0's store is as new as rank 0. A store not up yet would hold the
  // reads below for a while (it is waited for): a write, which fails at
  // once, tells first.
  if (rank_ == 0 ||
      !store.Set(WorldSizeKey(rank_), absl::StrCat(world_size_)).ok()) {
    return absl::OkStatus();
  }
  const int64_t highest = HighestRound(store);
  if (highest < 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "group: the ranks already connected round ", highest,
      " through rank 0's store: this daemon is a restart of rank ", rank_,
      ", and a group that meets in rank 0's daemon cannot take a rank back; "
      "expected every rank restarted (with --checkpoint_dir they resume "
      "from the ranks' last group checkpoint), or the group started with "
      "--rendezvous=etcd://HOST:PORT/JOB, where a rank can be replaced"));
}

absl::Status GroupMembership::NameOtherWorldSizes(
    RendezvousStore& store, const absl::Status& failure) const {
  std::string others;
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    absl::StatusOr<std::string> size =
        store.Get(WorldSizeKey(r), absl::Milliseconds(1));
    int theirs = 0;
    if (size.ok() && absl::SimpleAtoi(*size, &theirs) &&
        theirs != world_size_) {
      absl::StrAppend(&others, ", rank ", r, " has ", theirs);
    }
  }
  if (others.empty()) return failure;
  return absl::FailedPreconditionError(absl::StrCat(
      "world_size: this rank (", rank_, ") has --world_size=", world_size_,
      others, "; expected the same --world_size on every rank (",
      failure.message(), ")"));
}

void GroupMembership::NoteMembersLocked(int64_t round) {
  if (!etcd()) return;  // Only an etcd rendezvous outlives a daemon.
  RendezvousStore* store = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    store = store_.get();
  }
  std::vector<std::string> incarnations(world_size_);
  std::vector<std::string> addresses(world_size_);
  for (int r = 0; r < world_size_; ++r) {
    // Every rank set both before it connected the round: one look each.
    absl::StatusOr<std::string> incarnation =
        store->Get(IncarnationKey(r), absl::Milliseconds(1));
    if (incarnation.ok()) incarnations[r] = *incarnation;
    absl::StatusOr<std::string> address =
        DaemonAddressOf(*store, r, absl::Milliseconds(1));
    if (address.ok()) addresses[r] = *address;
  }
  absl::MutexLock lock(&mutex_);
  for (int r = 0; r < world_size_ && !incarnations_.empty(); ++r) {
    if (r == rank_ || incarnations_[r].empty() || incarnations[r].empty() ||
        incarnations_[r] == incarnations[r]) {
      continue;
    }
    replacements_.push_back({r, addresses_[r], addresses[r], round});
    log::Warning("a rank of the group was replaced",
                 {{"rank", r},
                  {"previous_address", addresses_[r]},
                  {"address", addresses[r]},
                  {"round", round}});
  }
  incarnations_ = std::move(incarnations);
  addresses_ = std::move(addresses);
}

absl::StatusOr<bool> GroupMembership::CatchUpWithReplacements(
    absl::Duration timeout) {
  if (!etcd()) return false;
  {
    absl::MutexLock lock(&mutex_);
    absl::Status joined = AwaitJoinedLocked(absl::ZeroDuration());
    if (!joined.ok()) return joined;
  }
  absl::MutexLock serial(&collective_mutex_);
  RendezvousStore* store = nullptr;
  std::vector<std::string> known;
  std::vector<std::string> addresses;
  {
    absl::MutexLock lock(&mutex_);
    store = store_.get();
    known = incarnations_;
    addresses = addresses_;
  }
  // Another daemon serves a rank now, or the one this daemon connected
  // with is gone (its replacement may still be waiting for the rank).
  bool changed = false;
  for (int r = 0; r < world_size_ && !changed; ++r) {
    if (r == rank_ || r >= static_cast<int>(known.size())) continue;
    absl::StatusOr<std::string> incarnation =
        store->Get(IncarnationKey(r), absl::Milliseconds(1));
    changed = (incarnation.ok() && *incarnation != known[r]) ||
              (!addresses[r].empty() &&
               !AcceptsConnections(addresses[r], absl::Seconds(1)));
  }
  if (!changed) return false;
  const int64_t before = replacement_count();
  absl::Status reformed = ReformLocked(timeout);
  if (!reformed.ok()) return reformed;
  return replacement_count() != before;
}

std::vector<RankReplacement> GroupMembership::replacements() const {
  absl::MutexLock lock(&mutex_);
  return replacements_;
}

std::string GroupMembership::tensor_backend() const {
  absl::MutexLock lock(&mutex_);
  return tensor_backend_;
}

int64_t GroupMembership::replacement_count() const {
  absl::MutexLock lock(&mutex_);
  return static_cast<int64_t>(replacements_.size());
}

absl::Status GroupMembership::ReplacedSince(int64_t before) const {
  absl::MutexLock lock(&mutex_);
  std::string which;
  for (size_t i = static_cast<size_t>(before); i < replacements_.size(); ++i) {
    const RankReplacement& replaced = replacements_[i];
    absl::StrAppend(&which, which.empty() ? "" : ", ", "rank ", replaced.rank,
                    " (now ", replaced.address, ", was ",
                    replaced.previous_address, ")");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "group: re-formed as round ", round_, " with ", which,
      " replaced; the call was not run: the group's optimizers made before "
      "are dropped; expected CreateZero or CreatePostLocalSgd again on "
      "every rank (with --checkpoint_dir they resume from the ranks' last "
      "group checkpoint)"));
}

absl::Status GroupMembership::ConnectLocked(int64_t round,
                                            absl::Duration timeout) {
  GlooOptions options;
  RendezvousStore* store = nullptr;
  Device device;
  {
    absl::MutexLock lock(&mutex_);
    device = settings_.device;
    options.rank = settings_.rank;
    options.size = settings_.world_size;
    options.hostname = settings_.hostname;
    store = store_.get();
  }
  options.prefix = RoundPrefix(round);
  options.timeout = timeout;
  // Best effort: read only to explain a rendezvous that failed, and only
  // from a store that answered (a store not up yet would hold each read).
  const bool store_answered =
      store->Set(WorldSizeKey(options.rank), absl::StrCat(options.size)).ok();
  options.cancelled = [this] { return stopping_.load(); };
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      CreateGlooCommunicator(options, store);
  // Then what carries the tensors, from every rank's device: the gloo
  // communicator itself, or it paired with NCCL or staging (and a mixed
  // group is refused, alike on every rank).
  absl::StatusOr<TensorCommunicators> tensors =
      communicator.ok() ? TensorCommunicators::Choose(
                              **communicator, device, store,
                              absl::StrCat("nccl/round", round), timeout)
                        : communicator.status();
  if (tensors.ok()) {
    communicator = tensors->Pair(*std::move(communicator), "");
  } else {
    communicator = tensors.status();
  }
  if (!communicator.ok()) {
    // A peer arriving later must wait for this rank's next address, not
    // connect to the one it gave up.
    store->Delete(GlooRendezvousKey(options)).IgnoreError();
    // Sizes differ when the ranks met and their address lists did not
    // fit; not when one never came (a timeout, where a key may be another
    // launch's) or this daemon stops.
    const absl::Status failed = communicator.status();
    const bool met = !absl::IsDeadlineExceeded(failed) &&
                     !absl::IsCancelled(failed) && !stopping_.load();
    return store_answered && met ? NameOtherWorldSizes(*store, failed) : failed;
  }
  // Best effort: the ranks that re-form start after the highest round any
  // rank reached, and the previous round's address is no longer read.
  {
    absl::MutexLock lock(&mutex_);
    reached_round_ = std::max(reached_round_, round);
  }
  store->Set(RoundKey(options.rank), absl::StrCat(round)).IgnoreError();
  if (round > 0) {
    GlooOptions previous = options;
    previous.prefix = RoundPrefix(round - 1);
    store->Delete(GlooRendezvousKey(previous)).IgnoreError();
  }
  global_->Reset(*std::move(communicator));
  group_ = std::make_unique<GlooCommunicatorGroup>(
      global_.get(), options, store,
      [tensors = *tensors](std::unique_ptr<Communicator> control,
                           const std::string& name) {
        return tensors.Pair(std::move(control), name);
      });
  {
    absl::MutexLock lock(&mutex_);
    tensor_backend_ = tensors->choice().name;
  }
  log::Info("group round connected",
            {{"round", round},
             {"tensor_backend", tensors->choice().name},
             {"why", tensors->choice().reason}});
  return absl::OkStatus();
}

GroupMembership::State GroupMembership::state() const {
  absl::MutexLock lock(&mutex_);
  return state_;
}

absl::Status GroupMembership::error() const {
  absl::MutexLock lock(&mutex_);
  return error_;
}

int64_t GroupMembership::round() const {
  absl::MutexLock lock(&mutex_);
  return round_;
}

void GroupMembership::MarkFailed(const absl::Status& failure) {
  round_failed_ = true;
  int64_t round = 0;
  {
    absl::MutexLock lock(&mutex_);
    round = round_;
  }
  SetState(State::kFailed,
           absl::Status(failure.code(),
                        absl::StrCat("round ", round,
                                     " of the group failed on "
                                     "rank ",
                                     rank_, ": ", failure.message())));
}

absl::Status GroupMembership::ReformLocked(absl::Duration timeout) {
  // Joining may have failed before there was a store (this rank held by
  // another daemon, etcd unreachable): it is opened now.
  absl::Status opened = OpenStoreLocked();
  if (!opened.ok()) {
    const absl::Status failure = absl::FailedPreconditionError(absl::StrCat(
        "re-forming the group failed on rank ", rank_, ": ", opened.message()));
    SetState(State::kFailed, failure);
    return failure;
  }
  int64_t next = 0;
  absl::Status previous;
  RendezvousStore* store = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    next = round_ + 1;
    previous = error_;
    store = store_.get();
  }
  // After the highest round any rank reached: ranks one round apart (a
  // connect that completed on some and timed out on others) meet again.
  next = std::max(next, HighestRound(*store) + 1);
  // The old round's connections go first: a peer still in one of its
  // collectives fails at once instead of at its timeout.
  group_.reset();
  global_->Reset(nullptr);
  absl::Status connected = ConnectLocked(next, timeout);
  if (!connected.ok()) {
    round_failed_ = true;
    const absl::Status failure = absl::FailedPreconditionError(absl::StrCat(
        previous.ok() ? "" : absl::StrCat(CauseOf(previous.message()), "; "),
        kReformFailed, next, " failed on rank ", rank_, ": ",
        connected.message(),
        "; expected every rank to re-form it (GroupService.Reform, or the "
        "same group call, on every rank)"));
    SetState(State::kFailed, failure);
    return failure;
  }
  round_failed_ = false;
  {
    absl::MutexLock lock(&mutex_);
    round_ = next;
    joined_ = true;  // A rank whose joining failed has joined now.
  }
  NoteMembersLocked(next);
  SetState(State::kReady, absl::OkStatus());
  return absl::OkStatus();
}

absl::Status GroupMembership::Reform(absl::Duration timeout) {
  {
    // Joining must be over; when it failed, re-forming is the way in.
    absl::MutexLock lock(&mutex_);
    absl::Status joined = AwaitJoinedLocked(timeout);
    if (!joined.ok() && state_ == State::kJoining) return joined;
  }
  absl::MutexLock serial(&collective_mutex_);
  return ReformLocked(timeout);
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
  {
    absl::MutexLock lock(&mutex_);
    absl::Status joined = AwaitJoinedLocked(timeout);
    if (!joined.ok()) return joined;
  }
  absl::MutexLock serial(&collective_mutex_);
  if (claim_ != nullptr && claim_->lost()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group: another daemon holds rank ", rank_,
        " now (this daemon's hold in etcd expired); expected this daemon to "
        "be stopped"));
  }
  // A round re-formed here with another daemon in it is no place for a
  // call made for the old one (replacements are counted only around a
  // re-formation: a call on a sound round pays nothing for them).
  if (round_failed_) {
    const int64_t before = replacement_count();
    absl::Status reformed = ReformLocked(timeout);
    if (!reformed.ok()) return reformed;
    if (replacement_count() != before) return ReplacedSince(before);
  }
  for (int attempt = 0;; ++attempt) {
    group_->SetTimeout(timeout);
    global_->BeginCall();
    absl::Status status = collective(*group_);
    // Only a collective that failed (a peer gone, a timeout, the
    // connections closed) breaks gloo's communicator; an error of the
    // call's own checks does not.
    if (!IsCollectiveFailure(status)) return status;
    MarkFailed(status);
    // The round was broken before this call changed anything (its first
    // collective failed at once, a peer having closed the connections):
    // a new round, and the call once more.
    const bool untouched =
        !global_->succeeded() && !absl::IsDeadlineExceeded(status);
    if (attempt > 0 || !untouched) return NameLostRanks(status);
    const int64_t before = replacement_count();
    if (!ReformLocked(timeout).ok()) return NameLostRanks(status);
    if (replacement_count() != before) return ReplacedSince(before);
  }
}

absl::Status GroupMembership::AwaitJoinedLocked(absl::Duration timeout) {
  auto joined = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return joined_ || state_ == State::kFailed;
  };
  mutex_.AwaitWithTimeout(absl::Condition(&joined), timeout);
  if (joined_) return absl::OkStatus();
  if (state_ == State::kJoining) {
    return absl::UnavailableError(
        "group: still waiting for the other ranks to join");
  }
  return absl::FailedPreconditionError(
      absl::StrCat("group: joining failed: ", error_.message()));
}

absl::Status GroupMembership::Publish(const std::string& key,
                                      const std::string& value) {
  RendezvousStore* store = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    absl::Status joined = AwaitJoinedLocked(absl::ZeroDuration());
    if (!joined.ok()) return joined;
    store = store_.get();
  }
  return store->Set(key, value);
}

absl::StatusOr<std::string> GroupMembership::Lookup(const std::string& key,
                                                    absl::Duration timeout) {
  RendezvousStore* store = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    absl::Status joined = AwaitJoinedLocked(absl::ZeroDuration());
    if (!joined.ok()) return joined;
    store = store_.get();
  }
  return store->Get(key, timeout);
}

absl::StatusOr<int> GroupMembership::RanksOnThisHost(absl::Duration timeout) {
  RendezvousStore* store = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    absl::Status joined = AwaitJoinedLocked(timeout);
    if (!joined.ok()) return joined;
    store = store_.get();
  }
  auto host_of = [](const std::string& address) {
    return address.substr(0, address.rfind(':'));
  };
  std::vector<std::string> hosts;
  for (int r = 0; r < world_size_; ++r) {
    absl::StatusOr<std::string> address =
        DaemonAddressOf(*store, r, absl::Seconds(1));
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

std::vector<int> GroupMembership::lost_ranks() const {
  absl::MutexLock lock(&mutex_);
  return lost_ranks_;
}

absl::Status GroupMembership::NameLostRanks(const absl::Status& failure) {
  RendezvousStore* store = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    store = store_.get();
  }
  std::string lost;
  std::vector<int> lost_ranks;
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    // The store is rank 0's: if rank 0 is gone, so is the address book.
    absl::StatusOr<std::string> address =
        DaemonAddressOf(*store, r, absl::Seconds(1));
    if (address.ok() && AcceptsConnections(*address, absl::Seconds(1))) {
      continue;
    }
    absl::StrAppend(&lost, lost.empty() ? "" : ", ", "rank ", r,
                    address.ok() ? absl::StrCat(" (", *address, ")") : "");
    lost_ranks.push_back(r);
  }
  {
    absl::MutexLock lock(&mutex_);
    lost_ranks_ = lost_ranks;
  }
  const std::string verdict =
      lost.empty() ? "every other rank still accepts connections"
                   : absl::StrCat("lost: ", lost, " no longer answers");
  return absl::Status(failure.code(),
                      absl::StrCat(failure.message(), "; ", verdict));
}

}  // namespace distopt
