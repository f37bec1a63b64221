// gloo's handling of a pair's socket events, in place of its own (as
// gloo_socket_addresses.cc does for its address lookups): gloo's, guarded.
//
// A pair handles what arrives on its socket on gloo's device thread, and
// checks each message against what this rank posted: a payload for a slot
// it has no receive for, or one longer than that receive, or past a
// buffer's end, fails a GLOO_ENFORCE, which throws; nothing on that thread
// catches, so the process ends. Such bytes come from anyone who reaches a
// rank's pair port while it waits for its peer (a pair takes the first
// connection it accepts as its peer, and gloo's framing is plain), or from
// a peer that went wrong. Here what gloo's handling throws fails the pair
// instead, as a read error does: the collective waiting on it returns the
// error, and the group's next round connects afresh.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>

#include "gloo/common/error.h"
#include "gloo/transport/tcp/pair.h"

namespace gloo {
namespace transport {
namespace tcp {
namespace {

using HandleEvents = void (*)(Pair*, int);

// libgloo's own Pair::handleEvents: the next definition after this one.
HandleEvents GlooHandleEvents() {
  static const HandleEvents original = [] {
    void* symbol =
        dlsym(RTLD_NEXT, "_ZN4gloo9transport3tcp4Pair12handleEventsEi");
    if (symbol == nullptr) {
      // Only a gloo linked into this binary itself has none to find.
      std::fprintf(stderr,
                   "distopt: gloo's Pair::handleEvents was not found (%s); "
                   "expected gloo as a shared library\n",
                   dlerror());
      std::abort();
    }
    return reinterpret_cast<HandleEvents>(symbol);
  }();
  return original;
}

}  // namespace

// Called through gloo's vtables, on the device thread. gloo's device loop
// calls it through the pair's Handler base, whose vtable entry is the
// thunk _ZThn16_...handleEvents, and libgloo's thunk jumps straight into
// libgloo's own body: the thunk must be replaced too. Defining the
// function here emits this file's thunk beside it, under the same name;
// the daemon exports both (libgloo's vtables refer to them by name), so
// they come before libgloo's.
void Pair::handleEvents(int events) {
  std::string failure;
  try {
    GlooHandleEvents()(this, events);
    return;
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "an exception of unknown type";
  }
  // gloo's own handling takes the pair's lock only when it is free (a
  // thread holding it may be waiting for this one): so does this. Missed,
  // the pair is left as it is, and its collective ends at its timeout.
  std::unique_lock<std::mutex> lock(m_, std::try_to_lock);
  if (!lock || ex_ != nullptr || state_ == CLOSED) return;
  try {
    signalException(
        GLOO_ERROR_MSG("pair with ", peer_.str(),
                       " received what this rank did not expect: ", failure));
  } catch (...) {
    // Closing it failed too (gloo checks its epoll calls): the pair is
    // left as it is, as when the lock was taken.
  }
}

}  // namespace tcp
}  // namespace transport
}  // namespace gloo
