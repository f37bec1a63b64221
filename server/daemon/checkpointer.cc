#include "server/daemon/checkpointer.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/metrics.h"
#include "server/dist_optim/optimizers_checkpoint.h"
#include "server/localsgd/local_sgd_checkpoint.h"
#include "server/zero/zero_checkpoint.h"

namespace distopt {

Checkpointer::Checkpointer(CheckpointSchedule schedule,
                           ParameterStore* parameters,
                           OptimizerTable* optimizers, ZeroRunner* zero,
                           LocalSgdRunner* local_sgd,
                           std::function<absl::Status()> damage)
    : schedule_(std::move(schedule)),
      parameters_(parameters),
      optimizers_(optimizers),
      zero_(zero),
      local_sgd_(local_sgd),
      damage_(std::move(damage)) {}

Checkpointer::~Checkpointer() {
  Stop();
  absl::MutexLock lock(&saving_);
  if (dir_lock_ >= 0) close(dir_lock_);
}

absl::StatusOr<RestoredCheckpoint> Checkpointer::Restore() {
  absl::StatusOr<int> lock = LockCheckpointDir(schedule_.dir);
  if (!lock.ok()) return lock.status();
  {
    absl::MutexLock one_at_a_time(&saving_);
    dir_lock_ = *lock;
  }
  absl::StatusOr<RestoredCheckpoint> restored = LoadCheckpoint(
      *parameters_, schedule_.dir, [this](const CheckpointSections& sections) {
        // Everything read (and checked) first: the table's restore is all
        // or nothing, and the ZeRO state only waits for CreateZero.
        absl::StatusOr<std::optional<ZeroCheckpoint>> zero =
            ReadZeroCheckpoint(sections);
        if (!zero.ok()) return zero.status();
        absl::StatusOr<std::optional<LocalSgdCheckpoint>> local_sgd =
            ReadLocalSgdCheckpoint(sections);
        if (!local_sgd.ok()) return local_sgd.status();
        std::vector<std::string> dropped;
        absl::Status status =
            RestoreOptimizers(sections, *optimizers_, &dropped);
        if (!status.ok()) return status;
        for (const std::string& line : dropped) {
          log::Warning("optimizer not restored", {{"reason", line}});
        }
        if (zero->has_value()) zero_->SetRestored(**std::move(zero));
        if (local_sgd->has_value()) {
          local_sgd_->SetRestored(**std::move(local_sgd));
        }
        return absl::OkStatus();
      });
  if (!restored.ok()) {
    absl::Status failed = restored.status();
    failed.SetPayload(kCheckpointNotRestored, absl::Cord());
    return failed;
  }
  if (!restored->interrupted_save.empty()) {
    log::Warning("interrupted checkpoint save found at start-up",
                 {{"what", restored->interrupted_save}});
  }
  {
    absl::MutexLock lock(&mutex_);
    restore_fell_back_ = restored->fell_back;
  }
  return restored;
}

void Checkpointer::Start() {
  const bool by_time = schedule_.interval > absl::ZeroDuration();
  const bool by_steps = schedule_.every_steps > 0;
  if (!by_time && !by_steps) return;
  if (by_steps) {
    // Counting is all the step path does; the scheduler wakes on the count.
    optimizers_->SetStepObserver(
        [this] { steps_.fetch_add(1, std::memory_order_relaxed); });
    // A group's checkpoints are taken at the same group step on every
    // rank: the step that reaches a multiple of the period asks for one,
    // and the next step waits until its copy is made.
    GroupStepHooks hooks;
    hooks.after = [this](int64_t group_step) {
      if (group_step % schedule_.every_steps != 0) return;
      absl::MutexLock lock(&mutex_);
      group_cut_pending_ = true;
    };
    hooks.before = [this] {
      absl::MutexLock lock(&mutex_);
      mutex_.Await(absl::Condition(
          +[](Checkpointer* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mutex_) {
            return !self->group_cut_pending_ || self->stopping_;
          },
          this));
    };
    zero_->SetStepHooks(hooks);
    local_sgd_->SetStepHooks(hooks);
  }
  scheduler_ = std::thread([this] { RunSchedule(); });
}

void Checkpointer::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (scheduler_.joinable()) scheduler_.join();
}

void Checkpointer::RunSchedule() {
  absl::Time next = absl::Now() + schedule_.interval;
  std::string last_logged;
  // Steps are counted without a lock: the count is looked at this often.
  const absl::Duration poll = absl::Milliseconds(20);
  while (true) {
    const bool by_time = schedule_.interval > absl::ZeroDuration();
    const bool stopping = [&] {
      absl::MutexLock lock(&mutex_);
      auto due = [&] {
        mutex_.AssertHeld();
        return stopping_ || group_cut_pending_ ||
               (by_time && absl::Now() >= next) ||
               (schedule_.every_steps > 0 &&
                steps_.load(std::memory_order_relaxed) >=
                    schedule_.every_steps);
      };
      while (!due()) {
        mutex_.AwaitWithTimeout(absl::Condition(&stopping_), poll);
      }
      return stopping_;
    }();
    if (stopping) return;
    absl::StatusOr<SaveReport> saved = Save("periodic", nullptr);
    // Once per new error: a save refused again and again (a torn model
    // waiting for its repair) does not flood the log.
    if (!saved.ok() && saved.status().ToString() != last_logged) {
      last_logged = saved.status().ToString();
      log::Error("periodic checkpoint failed, the last good one is kept",
                 {{"error", last_logged}});
    }
    if (saved.ok()) last_logged.clear();
    next = absl::Now() + schedule_.interval;
  }
}

namespace {

// A save in /metrics: by reason ("periodic", "shutdown", "request") and
// result; for a good one its duration, the time steps were held back for
// its copy, its bytes and when it was saved (Prometheus's way to say an
// age: time() - distopt_checkpoint_last_success_timestamp_seconds).
absl::StatusOr<SaveReport> Recorded(const std::string& reason,
                                    const metrics::Stopwatch& timer,
                                    absl::StatusOr<SaveReport> saved) {
  static auto& saves = metrics::CounterFamily(
      "distopt_checkpoint_saves_total",
      "Checkpoint saves by reason and result (saved, failed, cancelled)");
  static auto& seconds = metrics::LatencyFamily(
      "distopt_checkpoint_save_seconds",
      "Time a good checkpoint save took, from its request to its rename");
  static auto& held = metrics::LatencyFamily(
      "distopt_checkpoint_snapshot_seconds",
      "Time steps were held back while a save copied the state");
  static prometheus::Gauge& bytes =
      metrics::GaugeFamily("distopt_checkpoint_last_bytes",
                           "Bytes of the last good checkpoint")
          .Add({});
  static prometheus::Gauge& when =
      metrics::GaugeFamily("distopt_checkpoint_last_success_timestamp_seconds",
                           "Unix time of the last good checkpoint")
          .Add({});
  const char* result = saved.ok() ? "saved"
                       : saved.status().code() == absl::StatusCode::kCancelled
                           ? "cancelled"
                           : "failed";
  metrics::Add(
      metrics::CounterWith(saves, {{"reason", reason}, {"result", result}}));
  if (saved.ok() && metrics::Recording()) {
    metrics::Observe(metrics::LatencyWith(seconds, {{"reason", reason}}),
                     timer.Seconds());
    metrics::Observe(metrics::LatencyWith(held, {{"reason", reason}}),
                     absl::ToDoubleSeconds(saved->snapshot));
    bytes.Set(static_cast<double>(saved->saved.bytes));
    when.Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  }
  return saved;
}

}  // namespace

absl::StatusOr<SaveReport> Checkpointer::Save(
    const std::string& reason, const std::function<bool()>& abandoned) {
  const metrics::Stopwatch timer;
  return Recorded(reason, timer,
                  SaveContents(reason, /*live=*/false, abandoned));
}

absl::StatusOr<SaveReport> Checkpointer::SaveAtShutdown() {
  const metrics::Stopwatch timer;
  return Recorded("shutdown", timer, SaveContents("shutdown", /*live=*/true));
}

absl::Status Checkpointer::Failed(absl::Status status) {
  absl::MutexLock lock(&mutex_);
  last_save_error_ = status.ToString();
  group_cut_pending_ = false;  // The group steps go on without this save.
  return status;
}

absl::Status Checkpointer::KeepFolderLocked() {
  if (dir_lock_ < 0) return absl::OkStatus();
  absl::Status locked = CheckStillLocked(schedule_.dir, dir_lock_);
  if (locked.ok()) return absl::OkStatus();
  // Made and locked again, unless another daemon has taken the path since
  // (its checkpoints are not this daemon's to rotate away).
  absl::Status made = CheckCheckpointDir(schedule_.dir);
  absl::StatusOr<int> relocked =
      made.ok() ? LockCheckpointDir(schedule_.dir) : made;
  if (!relocked.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        locked.message(), "; not saved: ", relocked.status().message()));
  }
  close(dir_lock_);
  dir_lock_ = *relocked;
  log::Warning("checkpoint folder made and locked again",
               {{"checkpoint_dir", schedule_.dir}, {"why", locked.message()}});
  return absl::OkStatus();
}

absl::StatusOr<SaveReport> Checkpointer::SaveContents(
    const std::string& reason, bool live,
    const std::function<bool()>& abandoned) {
  absl::MutexLock one_at_a_time(&saving_);
  if (abandoned != nullptr && abandoned()) {
    // Its caller gave up while an earlier save was written: no one waits
    // for this one (and a queue of them would hold the daemon's threads).
    return absl::CancelledError(absl::StrCat(
        "--checkpoint_dir=", schedule_.dir,
        ": not saved: the caller gave up (deadline or cancellation) while an "
        "earlier save was written"));
  }
  // Counted from here, whether or not this save succeeds: a refused save
  // is asked for again only after as many steps more.
  steps_.store(0, std::memory_order_relaxed);
  absl::Status locked = KeepFolderLocked();
  if (!locked.ok()) return Failed(locked);
  absl::Status damage = damage_ != nullptr ? damage_() : absl::OkStatus();
  if (!damage.ok()) {
    // A model torn by a step that failed half-way is not saved as good:
    // the last good checkpoint stays.
    return Failed(absl::FailedPreconditionError(absl::StrCat(
        "--checkpoint_dir=", schedule_.dir,
        ": not saved, the last good checkpoint is kept: ", damage.message())));
  }
  const absl::Time start = absl::Now();
  CheckpointContents contents;
  const bool scheduled =
      schedule_.interval > absl::ZeroDuration() || schedule_.every_steps > 0;
  if (scheduled && !live) {
    // The memory of the copy first, outside the locks: steps wait only
    // for the copy itself.
    absl::Status prepared = PrepareCopies(*parameters_, &recycled_values_);
    if (prepared.ok())
      prepared = optimizers_->PrepareSnapshot(&recycled_state_);
    if (!prepared.ok()) return Failed(prepared);
  }
  // The cut: the table's optimizers, then the ZeRO optimizer, then the
  // post-local SGD one, then the parameters (the order their steps take
  // the locks in).
  auto copy_parameters = [&]() -> absl::Status {
    if (live) {
      contents = LiveContents(*parameters_);
      return absl::OkStatus();
    }
    absl::StatusOr<CheckpointContents> copied =
        CopyContents(*parameters_, scheduled ? &recycled_values_ : nullptr);
    if (!copied.ok()) return copied.status();
    contents = *std::move(copied);
    return absl::OkStatus();
  };
  std::optional<ZeroCheckpoint> zero;
  std::optional<LocalSgdCheckpoint> local_sgd;
  auto copy_local_sgd = [&]() -> absl::Status {
    absl::StatusOr<std::optional<LocalSgdCheckpoint>> copied =
        local_sgd_->Snapshot(copy_parameters);
    if (!copied.ok()) return copied.status();
    local_sgd = *std::move(copied);
    return absl::OkStatus();
  };
  auto copy_zero = [&]() -> absl::Status {
    absl::StatusOr<std::optional<ZeroCheckpoint>> copied =
        zero_->Snapshot(copy_local_sgd);
    if (!copied.ok()) return copied.status();
    zero = *std::move(copied);
    return absl::OkStatus();
  };
  absl::StatusOr<std::vector<OptimizerTable::Saved>> optimizers =
      optimizers_->Snapshot(copy_zero, std::move(recycled_state_));
  recycled_state_.clear();
  {
    // The copy is made (or failed): a group step waiting for it goes on.
    // Cleared here and on the refusals above only, never after the
    // write: a later group step may have asked for the next save by then.
    absl::MutexLock lock(&mutex_);
    group_cut_pending_ = false;
  }
  SaveReport report;
  report.snapshot = absl::Now() - start;
  absl::StatusOr<SavedCheckpoint> saved = absl::UnknownError("not saved");
  if (optimizers.ok()) {
    contents.reason = reason;
    contents.sections = OptimizerSections(*optimizers, optimizers_->next_id());
    std::vector<CheckpointSection> more;
    if (zero.has_value()) more = ZeroSections(*zero);
    if (local_sgd.has_value()) {
      for (CheckpointSection& section : LocalSgdSections(*local_sgd)) {
        more.push_back(std::move(section));
      }
    }
    for (CheckpointSection& section : more) {
      contents.sections.push_back(std::move(section));
    }
    saved = SaveCheckpoint(contents, schedule_.dir, schedule_.keep);
    if (scheduled && !live) recycled_state_ = *std::move(optimizers);
  } else {
    saved = optimizers.status();
  }
  absl::MutexLock lock(&mutex_);
  if (!saved.ok()) {
    last_save_error_ = saved.status().ToString();
    return saved.status();
  }
  last_save_error_.clear();
  report.write = saved->took;
  report.saved.folder = "parameters";
  report.saved.whole = true;
  report.saved.saved_at = saved->saved_at;
  report.saved.reason = reason;
  report.saved.parameters = saved->parameters;
  for (const CheckpointSection& section : contents.sections) {
    report.saved.sections.push_back(section.name);
  }
  report.saved.bytes = saved->bytes;
  return report;
}

absl::StatusOr<std::vector<CheckpointListing>> Checkpointer::List() const {
  return ListCheckpoints(schedule_.dir);
}

std::string Checkpointer::restore_fell_back() const {
  absl::MutexLock lock(&mutex_);
  return restore_fell_back_;
}

std::string Checkpointer::last_save_error() const {
  absl::MutexLock lock(&mutex_);
  return last_save_error_;
}

}  // namespace distopt
