// Who is calling: under mutual TLS, the identity of the client's
// certificate (the autograd contexts a client makes are its own); "" for a
// caller without one (plaintext, or TLS without client certificates), when
// every client of a daemon shares every context.
#ifndef DISTOPT_SERVER_SERVICES_CALLER_IDENTITY_H_
#define DISTOPT_SERVER_SERVICES_CALLER_IDENTITY_H_

#include <string>

#include "grpcpp/server_context.h"

namespace distopt {

std::string CallerIdentity(const grpc::ServerContext& context);

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_CALLER_IDENTITY_H_
