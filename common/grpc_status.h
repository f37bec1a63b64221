// The one place where absl::Status and grpc::Status meet. Codes map one to
// one (both follow google.rpc.Code); messages are kept.
#ifndef DISTOPT_COMMON_GRPC_STATUS_H_
#define DISTOPT_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace distopt {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);
// The same for a client's call, the message prefixed with the worker and
// the call ("worker HOST:PORT: Step: ...").
absl::Status FromGrpcCall(const grpc::Status& status, absl::string_view worker,
                          absl::string_view call);

}  // namespace distopt

#endif  // DISTOPT_COMMON_GRPC_STATUS_H_
