// The daemon's transport security, from WorkerOptions: plaintext, TLS,
// mutual TLS, and optionally a bearer token every call must carry.
#ifndef DISTOPT_SERVER_DAEMON_SERVER_CREDENTIALS_H_
#define DISTOPT_SERVER_DAEMON_SERVER_CREDENTIALS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "server/daemon/worker_options.h"

namespace distopt {

// Reads the certificate, key, CA and token files the options name.
// INVALID_ARGUMENT naming the flag when a file cannot be read or is empty.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const WorkerOptions& options);

}  // namespace distopt

#endif  // DISTOPT_SERVER_DAEMON_SERVER_CREDENTIALS_H_
