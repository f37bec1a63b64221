// How distoptctl connects: the client's options from its TLS and token
// flags, which name files (the client's options hold their contents).
#ifndef DISTOPT_TOOLS_DISTOPTCTL_CONNECTION_H_
#define DISTOPT_TOOLS_DISTOPTCTL_CONNECTION_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"

namespace distopt {
namespace distoptctl {

struct ConnectionFlags {
  // Deadline of every call.
  absl::Duration timeout = absl::Seconds(5);
  // PEM files; an empty name is none. A CA file means TLS.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // The bearer token (surrounding whitespace dropped, as the daemon's
  // --auth_token_file is read).
  std::string token_file;
};

// INVALID_ARGUMENT naming the flag for a file that cannot be read or is
// empty, a certificate without its key (or the other way round), or a
// certificate or token without --tls_ca_file (gRPC sends neither over
// plaintext).
absl::StatusOr<ClientOptions> MakeClientOptions(const ConnectionFlags& flags);

}  // namespace distoptctl
}  // namespace distopt

#endif  // DISTOPT_TOOLS_DISTOPTCTL_CONNECTION_H_
