// GroupService calls through the generated gRPC client, as the GroupService
// tests make them: a rank's group and barriers, and the store's calls with or
// without the group's secret.
#ifndef DISTOPT_TESTS_GROUP_CALLS_H_
#define DISTOPT_TESTS_GROUP_CALLS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "client/client.h"
#include "common/group_secret.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/group.grpc.pb.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace testing {

inline std::unique_ptr<v1::GroupService::Stub> GroupServiceClient(
    Client& client, const std::string& address) {
  return v1::GroupService::NewStub(client.Channel(address));
}

// A call to the store carries the group's secret, as the ranks' calls do;
// a test of strangers passes another `secret`, or none ("").
inline void AsMember(grpc::ClientContext* context,
                     const std::string& secret = kTestGroupSecret) {
  if (!secret.empty()) context->AddMetadata(kGroupSecretMetadata, secret);
}

// The group of the daemon at `address`; fails the test if the call fails.
inline v1::GroupInfo GetGroup(Client& client, const std::string& address) {
  grpc::ClientContext context;
  v1::GroupInfo info;
  grpc::Status status = GroupServiceClient(client, address)
                            ->GetGroup(&context, v1::GetGroupRequest(), &info);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return info;
}

// The group of the daemon at `address` once it is no longer joining (or
// after `timeout`, still joining).
inline v1::GroupInfo GroupAfterJoining(Client& client,
                                       const std::string& address,
                                       absl::Duration timeout) {
  v1::GroupInfo info;
  PollUntil(
      [&] {
        info = GetGroup(client, address);
        return info.state() != v1::GroupInfo::JOINING;
      },
      timeout);
  return info;
}

inline grpc::Status Barrier(Client& client, const std::string& address,
                            int64_t timeout_ms) {
  grpc::ClientContext context;
  v1::BarrierRequest request;
  request.set_timeout_ms(timeout_ms);
  v1::BarrierResponse response;
  return GroupServiceClient(client, address)
      ->Barrier(&context, request, &response);
}

}  // namespace testing
}  // namespace distopt

#endif  // DISTOPT_TESTS_GROUP_CALLS_H_
