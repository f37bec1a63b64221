// gloo's TCP device for a communicator, with its device thread kept from
// preempting the collectives' own threads (see the .cc file).
#ifndef DISTOPT_SERVER_COMM_GLOO_DEVICE_H_
#define DISTOPT_SERVER_COMM_GLOO_DEVICE_H_

#include <memory>
#include <string>

#include "gloo/transport/device.h"

namespace distopt {

// gloo::transport::tcp::CreateDevice for pairs bound to `hostname`, its
// device thread under SCHED_BATCH (where this thread runs under the
// default policy; otherwise as gloo makes it). Throws as gloo does.
std::shared_ptr<gloo::transport::Device> CreateGlooDevice(
    const std::string& hostname);

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_GLOO_DEVICE_H_
