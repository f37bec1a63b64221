// Two of gloo's socket address lookups, in place of its own: this
// definition takes the place of gloo's (the daemon's symbols come before
// libgloo's, and gloo calls them through its PLT).
//
// fromPeerName: gloo asks a pair's socket for its peer's address as soon
// as the socket connects, on its device thread, and aborts the process
// when the call fails (GLOO_ENFORCE throws there, and nothing catches it).
// It fails with ENOTCONN whenever the connection was reset in between: a
// peer whose rendezvous was cancelled closing its listening socket with
// our connection still queued, or anyone who reaches a rank's pair port
// while it waits for its peer and resets the connection (one TCP reset
// took a daemon down). A connection that is already gone gets an
// unspecified address instead, which gloo prints as "[none]", and its
// first read on the socket fails the pair with an error the collective
// returns, as for any peer that goes away.
//
// fromSockName: gloo publishes a pair's listening address through the
// rendezvous store as the whole sockaddr_storage (128 bytes), of which
// getsockname fills 16 or 28; gloo's own left the rest as it found it on
// the stack, so every rank published pointers into its memory and the
// stack protector's canary to whoever reads the store. Here the rest is
// zeros.
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "gloo/common/logging.h"
#include "gloo/transport/tcp/address.h"

namespace gloo {
namespace transport {
namespace tcp {

Address Address::fromSockName(int fd) {
  struct sockaddr_storage self;
  std::memset(&self, 0, sizeof(self));
  socklen_t length = sizeof(self);
  if (getsockname(fd, reinterpret_cast<struct sockaddr*>(&self), &length) !=
      0) {
    const int error = errno;
    GLOO_ENFORCE(false, "getsockname: ", std::strerror(error));
  }
  return Address(self);
}

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
