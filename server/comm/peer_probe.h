// Whether a peer daemon still accepts TCP connections: after a collective
// fails, this tells which rank was lost. A plain connect, so it works the
// same whether the daemons speak TLS or not.
#ifndef DISTOPT_SERVER_COMM_PEER_PROBE_H_
#define DISTOPT_SERVER_COMM_PEER_PROBE_H_

#include <string>

#include "absl/time/time.h"

namespace distopt {

// `address` is "host:port" or "[v6]:port". False when the name does not
// resolve, the connection is refused, or it does not complete in `timeout`.
bool AcceptsConnections(const std::string& address, absl::Duration timeout);

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_PEER_PROBE_H_
