// ThreadSanitizer sees absl::Mutex (--config=tsan only).
//
// Debian's Abseil is not built with ThreadSanitizer, so its Mutex and
// CondVar take and give locks where ThreadSanitizer cannot see them, and
// every access that they order looks like a race. These definitions,
// linked into the test binary, come before libabsl_synchronization in the
// dynamic linker's lookup order: each forwards to Abseil's own function and
// tells ThreadSanitizer what it did, the annotations Abseil makes itself
// when it is built with ThreadSanitizer (a lock taken: acquire; given up:
// release). Abseil evaluates a waiter's Condition in whichever thread holds
// the lock at that moment (often the unlocking one, inside Unlock), so
// Condition::Eval acquires and releases the mutex its thread is working on.
//
// Only the order Abseil establishes is added; nothing here hides an
// access, so a race in the project's own code is still reported.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

extern "C" void __tsan_acquire(void* address);
extern "C" void __tsan_release(void* address);

namespace {

#define DISTOPT_STRINGIFY_(x) #x
#define DISTOPT_STRINGIFY(x) DISTOPT_STRINGIFY_(x)
// "_ZN4absl" + the inline namespace, length-prefixed (Itanium mangling).
constexpr char kNamespace[] =
    DISTOPT_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
static_assert(sizeof(kNamespace) - 1 < 10, "one-digit namespace length");

// Abseil's definition of `symbol` (its mangled name after the namespace).
template <typename Function>
Function Real(const char* symbol, const char* prefix = "_ZN4absl") {
  char name[256];
  std::snprintf(name, sizeof(name), "%s%zu%s%s", prefix, sizeof(kNamespace) - 1,
                kNamespace, symbol);
  void* real = dlsym(RTLD_NEXT, name);
  if (real == nullptr) {
    std::fprintf(stderr, "absl_mutex_annotations: no %s in Abseil\n", name);
    std::abort();
  }
  return reinterpret_cast<Function>(real);
}

// The mutex this thread is locking, unlocking or waiting on, for the
// Conditions Abseil evaluates meanwhile.
thread_local absl::Mutex* current_mutex = nullptr;

class Working {
 public:
  explicit Working(absl::Mutex* mutex) : previous_(current_mutex) {
    current_mutex = mutex;
  }
  ~Working() { current_mutex = previous_; }

 private:
  absl::Mutex* const previous_;
};

// Abseil's own deadlock detection keeps a graph of lock orders under an
// internal spin lock that ThreadSanitizer cannot see either; its copies
// would be reported as races. The other builds keep it.
const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

// What an Abseil call does with the lock of its mutex.
enum class Effect {
  kTakes,    // Lock, LockWhen...: held on return.
  kGivesUp,  // Unlock: given up.
  kWaits,    // Await, CondVar::Wait: given up meanwhile, held on return.
};

// Calls Abseil's `real(args...)` for `mutex` and tells ThreadSanitizer
// `effect`.
template <typename Real, typename... Args>
auto Annotated(absl::Mutex* mutex, Effect effect, Real real, Args&&... args) {
  Working working(mutex);
  if (effect != Effect::kTakes) __tsan_release(mutex);
  if constexpr (std::is_void_v<decltype(real(std::forward<Args>(args)...))>) {
    real(std::forward<Args>(args)...);
    if (effect != Effect::kGivesUp) __tsan_acquire(mutex);
  } else {
    const auto result = real(std::forward<Args>(args)...);
    if (effect != Effect::kGivesUp) __tsan_acquire(mutex);
    return result;
  }
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto* real = Real<void (*)(Mutex*)>("5Mutex4LockEv");
  Annotated(this, Effect::kTakes, real, this);
}

void Mutex::ReaderLock() {
  static auto* real = Real<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  Annotated(this, Effect::kTakes, real, this);
}

bool Mutex::TryLock() {
  static auto* real = Real<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  static auto* real = Real<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::Unlock() {
  static auto* real = Real<void (*)(Mutex*)>("5Mutex6UnlockEv");
  Annotated(this, Effect::kGivesUp, real, this);
}

void Mutex::ReaderUnlock() {
  static auto* real = Real<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  Annotated(this, Effect::kGivesUp, real, this);
}

void Mutex::LockWhen(const Condition& condition) {
  static auto* real = Real<void (*)(Mutex*, const Condition&)>(
      "5Mutex8LockWhenERKNS0_9ConditionE");
  Annotated(this, Effect::kTakes, real, this, condition);
}

void Mutex::ReaderLockWhen(const Condition& condition) {
  static auto* real = Real<void (*)(Mutex*, const Condition&)>(
      "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Annotated(this, Effect::kTakes, real, this, condition);
}

bool Mutex::LockWhenWithTimeout(const Condition& condition, Duration timeout) {
  static auto* real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Annotated(this, Effect::kTakes, real, this, condition, timeout);
}

bool Mutex::LockWhenWithDeadline(const Condition& condition, Time deadline) {
  static auto* real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Annotated(this, Effect::kTakes, real, this, condition, deadline);
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& condition,
                                      Duration timeout) {
  static auto* real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Annotated(this, Effect::kTakes, real, this, condition, timeout);
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& condition,
                                       Time deadline) {
  static auto* real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Annotated(this, Effect::kTakes, real, this, condition, deadline);
}

// Await gives the lock up while it waits and has it again when it returns.
void Mutex::Await(const Condition& condition) {
  static auto* real = Real<void (*)(Mutex*, const Condition&)>(
      "5Mutex5AwaitERKNS0_9ConditionE");
  Annotated(this, Effect::kWaits, real, this, condition);
}

bool Mutex::AwaitWithTimeout(const Condition& condition, Duration timeout) {
  static auto* real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Annotated(this, Effect::kWaits, real, this, condition, timeout);
}

bool Mutex::AwaitWithDeadline(const Condition& condition, Time deadline) {
  static auto* real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Annotated(this, Effect::kWaits, real, this, condition, deadline);
}

void CondVar::Wait(Mutex* mutex) {
  static auto* real =
      Real<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  Annotated(mutex, Effect::kWaits, real, this, mutex);
}

bool CondVar::WaitWithTimeout(Mutex* mutex, Duration timeout) {
  static auto* real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  return Annotated(mutex, Effect::kWaits, real, this, mutex, timeout);
}

bool CondVar::WaitWithDeadline(Mutex* mutex, Time deadline) {
  static auto* real = Real<bool (*)(CondVar*, Mutex*, Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  return Annotated(mutex, Effect::kWaits, real, this, mutex, deadline);
}

// Evaluated under the lock of the mutex this thread works on, whichever
// thread's Condition it is.
bool Condition::Eval() const {
  static auto* real =
      Real<bool (*)(const Condition*)>("9Condition4EvalEv", "_ZNK4absl");
  absl::Mutex* const mutex = current_mutex;
  if (mutex != nullptr) __tsan_acquire(mutex);
  const bool met = real(this);
  if (mutex != nullptr) __tsan_release(mutex);
  return met;
}

ABSL_NAMESPACE_END
}  // namespace absl
