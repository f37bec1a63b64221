#include "common/grpc_status.h"

#include "gtest/gtest.h"

namespace distopt {
namespace {

TEST(GrpcStatusTest, OkMapsToOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(GrpcStatusTest, EveryCodeAndMessageSurvivesBothWays) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code),
                              "field x: expected y");
    const grpc::Status wire = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(wire.error_code()), code);
    EXPECT_EQ(wire.error_message(), "field x: expected y");
    EXPECT_EQ(FromGrpcStatus(wire), status);
  }
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("p")).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("p")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

}  // namespace
}  // namespace distopt
