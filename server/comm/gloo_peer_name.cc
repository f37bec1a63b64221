// gloo asks a pair's socket for its peer's address as soon as the socket
// connects, on its device thread, and aborts the process when the call
// fails (GLOO_ENFORCE throws there, and nothing catches it). It fails with
// ENOTCONN whenever the connection was reset in between: a peer whose
// rendezvous was cancelled closing its listening socket with our
// connection still queued, or anyone who reaches a rank's pair port while
// it waits for its peer and resets the connection (one TCP reset took a
// daemon down).
//
// This definition takes the place of gloo's own (the daemon's symbols come
// before libgloo's, and gloo calls it through its PLT): a connection that
// is already gone gets an unspecified address instead, which gloo prints
// as "[none]", and its first read on the socket fails the pair with an
// error the collective returns, as for any peer that goes away.
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "gloo/common/logging.h"
#include "gloo/transport/tcp/address.h"

namespace gloo {
namespace transport {
namespace tcp {

Address Address::fromPeerName(int fd) {
  struct sockaddr_storage peer;
  std::memset(&peer, 0, sizeof(peer));
  socklen_t length = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<struct sockaddr*>(&peer), &length) ==
      0) {
    return Address(peer);
  }
  const int error = errno;
  // Any other failure is a descriptor gloo itself got wrong, as before.
  GLOO_ENFORCE_EQ(error, ENOTCONN, "getpeername: ", std::strerror(error));
  std::memset(&peer, 0, sizeof(peer));
  peer.ss_family = AF_UNSPEC;
  return Address(peer);
}

}  // namespace tcp
}  // namespace transport
}  // namespace gloo
