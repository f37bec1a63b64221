#include "common/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace distopt {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

absl::Status FromGrpcCall(const grpc::Status& status, absl::string_view worker,
                          absl::string_view call) {
  absl::Status converted = FromGrpcStatus(status);
  if (converted.ok()) return converted;
  return absl::Status(
      converted.code(),
      absl::StrCat("worker ", worker, ": ", call, ": ", converted.message()));
}

}  // namespace distopt
