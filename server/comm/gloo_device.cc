// Why the device thread runs under SCHED_BATCH.
//
// gloo's device thread reads every pair's socket. When it is woken and
// cannot take the pair's lock (a collective's thread holds it while it
// posts a send or a receive), it returns to epoll at once, which reports
// the same socket again: it spins. If that collective's thread was
// preempted while holding the lock, by this very thread waking on the same
// core, the spin lasts until the scheduler's next tick gives the core back
// (4 ms at HZ=250 on a kernel without preemption, as on this project's
// 2-core VMs). Seen there with gloo alone, two processes over loopback:
// every all-reduce of 4 KiB or of 800 KiB took 4.0 ms with each process
// on one core, and about half of them did without pinning, against
// 0.15-0.6 ms otherwise.
//
// A SCHED_BATCH thread does not preempt the thread running on its core
// when it wakes (the kernel's wakeup preemption is for SCHED_OTHER threads
// only); otherwise it keeps its full share (same weight, same nice). So
// the lock's holder runs on and releases it, and the device thread takes
// it on its next turn. Measured with zero_step_bench, the same build with
// and without (alternating runs): a ZeRO step of 200 x 1K parameters took
// 5-8 ms instead of 14-17 ms; the large model's steps stayed within the
// VM's noise.
#include "server/comm/gloo_device.h"

#include <sched.h>

#include "absl/cleanup/cleanup.h"
#include "gloo/transport/tcp/device.h"

namespace distopt {

std::shared_ptr<gloo::transport::Device> CreateGlooDevice(
    const std::string& hostname) {
  // The device thread starts in the device's constructor and takes the
  // policy of the thread that makes it: this one, under SCHED_BATCH for
  // that moment only. A thread under another policy than the default (a
  // real-time one a user chose) is left as it is, and so is its device's.
  // Both policies take priority 0, the only one they have.
  const sched_param param{};
  const bool batched = sched_getscheduler(0) == SCHED_OTHER &&
                       sched_setscheduler(0, SCHED_BATCH, &param) == 0;
  absl::Cleanup restore = [&] {
    if (batched) sched_setscheduler(0, SCHED_OTHER, &param);
  };
  gloo::transport::tcp::attr attr(hostname.c_str());
  return gloo::transport::tcp::CreateDevice(attr);
}

}  // namespace distopt
