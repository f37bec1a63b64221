#include "client/step_streams.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/sync_stream.h"

namespace distopt {

namespace {

// How long past its deadline a step whose reply has already come may take
// to be read (its caller was waiting for another worker's).
constexpr absl::Duration kLateReadGrace = absl::Milliseconds(100);

}  // namespace

// Cancels the calls that are still waiting past their deadline. It checks
// every few hundredths of the step timeout rather than waking at each
// deadline: arming and disarming then cost a map update, never a thread
// wake-up, and a step gives up at most that much past its deadline.
class StepStreams::Watchdog {
 public:
  explicit Watchdog(absl::Duration timeout)
      : period_(std::clamp(timeout / 32, absl::Milliseconds(5),
                           absl::Milliseconds(500))) {}
  ~Watchdog() {
    {
      absl::MutexLock lock(&mutex_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

  // Cancels `context` if it is still armed at `deadline`, setting `*fired`.
  void Arm(grpc::ClientContext* context, absl::Time deadline,
           std::atomic<bool>* fired) {
    absl::MutexLock lock(&mutex_);
    armed_[context] = {deadline, fired};
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  }
  void Disarm(grpc::ClientContext* context) {
    absl::MutexLock lock(&mutex_);
    armed_.erase(context);
  }

 private:
  struct Alarm {
    absl::Time deadline;
    std::atomic<bool>* fired;
  };

  void Run() {
    absl::MutexLock lock(&mutex_);
    while (!mutex_.AwaitWithTimeout(absl::Condition(&stopping_), period_)) {
      const absl::Time now = absl::Now();
      for (auto it = armed_.begin(); it != armed_.end();) {
        if (it->second.deadline > now) {
          ++it;
          continue;
        }
        it->second.fired->store(true);
        it->first->TryCancel();
        armed_.erase(it++);
      }
    }
  }

  const absl::Duration period_;
  absl::Mutex mutex_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  absl::flat_hash_map<grpc::ClientContext*, Alarm> armed_
      ABSL_GUARDED_BY(mutex_);
  std::thread thread_;
};

// One open StepStream call, serving one step at a time from the thread that
// sends it.
class StepStreams::Call {
 public:
  Call(const std::string& worker, std::shared_ptr<grpc::Channel> channel,
       absl::Duration timeout, Watchdog* watchdog)
      : worker_(worker),
        timeout_(timeout),
        watchdog_(watchdog),
        stub_(v1::OptimizerService::NewStub(std::move(channel))) {
    // The first step's headers go out with its request, not on their own.
    context_.set_initial_metadata_corked(true);
    stream_ = stub_->StepStream(&context_);
  }
  ~Call() { Close().IgnoreError(); }

  const std::string& worker() const { return worker_; }
  absl::Time last_used() const { return last_used_; }
  void MarkUsed() { last_used_ = absl::Now(); }
  // Whether this call served a step before the current one.
  bool reused() const { return steps_ > 1; }
  bool broken() const { return broken_; }

  void Send(uint64_t optimizer_id, uint64_t context_id) {
    ++steps_;
    deadline_ = absl::Now() + timeout_;
    v1::StepRequest request;
    request.set_optimizer_id(optimizer_id);
    request.set_context_id(context_id);
    // A write to a worker still connecting waits: bounded by the deadline,
    // and disarmed once written, so that nothing cancels the call before
    // its reply is awaited (Await).
    watchdog_->Arm(&context_, deadline_, &timed_out_);
    if (!stream_->Write(request)) broken_ = true;
    watchdog_->Disarm(&context_);
  }

  // Ends a stream that serves no step, without waiting for the worker's
  // reply to a graceful end (a stale one, or one to a worker gone quiet).
  void Abandon() {
    context_.TryCancel();
    broken_ = true;
  }

  // The outcome of the step sent last. The watchdog is armed only now: a
  // reply that came while the caller waited for another worker (one that
  // stopped answering, say, until its deadline) is still read, within a
  // short grace past the common deadline, not cancelled unread.
  absl::StatusOr<v1::StepResponse> Await() {
    watchdog_->Arm(&context_, std::max(deadline_, absl::Now() + kLateReadGrace),
                   &timed_out_);
    v1::StepOutcome outcome;
    const bool replied = !broken_ && stream_->Read(&outcome);
    watchdog_->Disarm(&context_);
    if (!replied) {
      broken_ = true;
      return Close();
    }
    // The watchdog cancelled the call just as the reply came: the reply
    // stands, the stream cannot serve another step.
    if (timed_out_) broken_ = true;
    if (outcome.code() == 0) return outcome.response();
    const int code = outcome.code();
    return FromGrpcCall(grpc::Status(code > 0 && code <= 16
                                         ? static_cast<grpc::StatusCode>(code)
                                         : grpc::StatusCode::UNKNOWN,
                                     outcome.message()),
                        worker_, "Step");
  }

 private:
  // Ends the stream (half-closing it first when it still works) and says
  // why it ended, as the error of the step that found it broken.
  absl::Status Close() {
    if (closed_) return closed_status_;
    closed_ = true;
    watchdog_->Arm(&context_, absl::Now() + timeout_, &timed_out_);
    if (!broken_) stream_->WritesDone();
    const grpc::Status status = stream_->Finish();
    watchdog_->Disarm(&context_);
    if (timed_out_) {
      closed_status_ = absl::DeadlineExceededError(
          absl::StrCat("worker ", worker_, ": Step: no reply within ",
                       absl::FormatDuration(timeout_),
                       " (the step may or may not have been applied)"));
    } else if (status.ok()) {
      closed_status_ = absl::UnavailableError(absl::StrCat(
          "worker ", worker_,
          ": Step: the worker ended the step stream (shutting down?); the "
          "step was not applied"));
    } else {
      closed_status_ = FromGrpcCall(status, worker_, "Step");
    }
    return closed_status_;
  }

  const std::string worker_;
  const absl::Duration timeout_;
  Watchdog* const watchdog_;
  const std::unique_ptr<v1::OptimizerService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::StepRequest, v1::StepOutcome>>
      stream_;
  std::atomic<bool> timed_out_ = false;
  absl::Time deadline_ = absl::InfiniteFuture();  // Of the step sent last.
  int64_t steps_ = 0;
  absl::Time last_used_ = absl::Now();
  bool broken_ = false;
  bool closed_ = false;
  absl::Status closed_status_;
};

StepStreams::StepStreams(absl::Duration timeout, ChannelFor channel_for)
    : timeout_(timeout),
      channel_for_(std::move(channel_for)),
      watchdog_(std::make_unique<Watchdog>(timeout)) {}

StepStreams::~StepStreams() {
  absl::MutexLock lock(&mutex_);
  idle_.clear();
}

std::vector<std::unique_ptr<StepStreams::Call>> StepStreams::TakeStaleLocked(
    const std::string& worker) {
  std::vector<std::unique_ptr<Call>> stale;
  auto it = idle_.find(worker);
  if (it == idle_.end()) return stale;
  const absl::Time before = absl::Now() - kIdleLife;
  std::vector<std::unique_ptr<Call>> kept;
  for (std::unique_ptr<Call>& call : it->second) {
    if (call->last_used() < before) call->Abandon();
    (call->last_used() < before ? stale : kept).push_back(std::move(call));
  }
  it->second = std::move(kept);
  open_[worker] -= static_cast<int>(stale.size());
  return stale;
}

std::unique_ptr<StepStreams::Call> StepStreams::Take(const Target& target,
                                                     bool fresh) {
  // Closed once the lock is let go (each waits for the worker's reply).
  std::vector<std::unique_ptr<Call>> stale;
  {
    absl::MutexLock lock(&mutex_);
    stale = TakeStaleLocked(target.worker);
    if (!fresh) {
      auto it = idle_.find(target.worker);
      if (it != idle_.end() && !it->second.empty()) {
        std::unique_ptr<Call> call = std::move(it->second.back());
        it->second.pop_back();
        return call;
      }
    }
    int& open = open_[target.worker];
    if (open >= kMaxOpenPerWorker) return nullptr;  // A unary Step instead.
    ++open;
  }
  return std::make_unique<Call>(target.worker, channel_for_(target.worker),
                                timeout_, watchdog_.get());
}

void StepStreams::Return(std::unique_ptr<Call> call) {
  absl::MutexLock lock(&mutex_);
  call->MarkUsed();
  idle_[call->worker()].push_back(std::move(call));
}

void StepStreams::Drop(std::unique_ptr<Call> call) {
  {
    absl::MutexLock lock(&mutex_);
    --open_[call->worker()];
  }
  call.reset();
}

absl::StatusOr<v1::StepResponse> StepStreams::UnaryStep(const Target& target,
                                                        uint64_t context_id) {
  auto stub = v1::OptimizerService::NewStub(channel_for_(target.worker));
  grpc::ClientContext context;
  // Sent only now, after the replies awaited before it: a whole timeout
  // of its own.
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  v1::StepRequest request;
  request.set_optimizer_id(target.optimizer_id);
  request.set_context_id(context_id);
  v1::StepResponse response;
  const grpc::Status status = stub->Step(&context, request, &response);
  if (!status.ok()) return FromGrpcCall(status, target.worker, "Step");
  return response;
}

std::vector<absl::StatusOr<v1::StepResponse>> StepStreams::StepAll(
    const std::vector<Target>& targets, uint64_t context_id) {
  std::vector<std::unique_ptr<Call>> calls;
  calls.reserve(targets.size());
  for (const Target& target : targets) {
    calls.push_back(Take(target, /*fresh=*/false));
    if (calls.back() != nullptr) {
      calls.back()->Send(target.optimizer_id, context_id);
    }
  }
  std::vector<absl::StatusOr<v1::StepResponse>> results;
  results.reserve(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    if (calls[i] == nullptr) {
      // As many steps in flight to this worker as streams may be open:
      // this one goes as a call of its own.
      results.push_back(UnaryStep(targets[i], context_id));
      continue;
    }
    absl::StatusOr<v1::StepResponse> result = calls[i]->Await();
    if (calls[i]->broken() && calls[i]->reused() &&
        !absl::IsDeadlineExceeded(result.status())) {
      // Most likely the stream died while idle: once more on a new one.
      Drop(std::move(calls[i]));
      calls[i] = Take(targets[i], /*fresh=*/true);
      if (calls[i] == nullptr) {
        results.push_back(UnaryStep(targets[i], context_id));
        continue;
      }
      calls[i]->Send(targets[i].optimizer_id, context_id);
      result = calls[i]->Await();
    }
    if (calls[i]->broken()) {
      Drop(std::move(calls[i]));
    } else {
      Return(std::move(calls[i]));
    }
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace distopt
