#include "server/daemon/worker_options.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

absl::Status Check(void (*edit)(WorkerOptions&)) {
  WorkerOptions options;
  edit(options);
  return ValidateWorkerOptions(options);
}

TEST(WorkerOptionsTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateWorkerOptions(WorkerOptions()).ok());
}

TEST(WorkerOptionsTest, EachBadFlagIsNamed) {
  struct Case {
    void (*edit)(WorkerOptions&);
    const char* expected;
  };
  const Case cases[] = {
      {[](WorkerOptions& o) { o.listen = "localhost"; }, "--listen=localhost"},
      {[](WorkerOptions& o) { o.listen = "h:70000"; }, "port from 0 to 65535"},
      {[](WorkerOptions& o) { o.world_size = 0; }, "--world_size=0"},
      {[](WorkerOptions& o) { o.rank = 1; }, "--rank=1: expected 0 to 0"},
      {[](WorkerOptions& o) {
         o.world_size = 3;
         o.peers = {"a:1"};
       },
       "expected world_size - 1 = 2"},
      {[](WorkerOptions& o) { o.world_size = 2; },
       "expected --peers or --rendezvous"},
      {[](WorkerOptions& o) {
         o.world_size = 2;
         o.peers = {"a:1"};
         o.rendezvous = "b:2";
       },
       "not both"},
      {[](WorkerOptions& o) {
         o.max_tensor_bytes = 10;
         o.max_total_bytes = 5;
       },
       "--max_tensor_bytes=10"},
  };
  for (const Case& c : cases) {
    absl::Status status = Check(c.edit);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.expected;
    EXPECT_THAT(status.message(), HasSubstr(c.expected));
  }
}

TEST(WorkerOptionsTest, DataParallelFlagsAreAccepted) {
  EXPECT_TRUE(Check([](WorkerOptions& o) {
                o.world_size = 3;
                o.rank = 2;
                o.peers = {"10.0.0.1:50051", "10.0.0.2:50051"};
                o.group_secret_file = "/run/secrets/group";
              }).ok());
  EXPECT_TRUE(Check([](WorkerOptions& o) {
                o.world_size = 4;
                o.rank = 1;
                o.rendezvous = "node0:50051";
                o.group_secret_file = "/run/secrets/group";
              }).ok());
}

TEST(WorkerOptionsTest, RanksOverTlsAreRefusedPlainly) {
  absl::Status status = Check([](WorkerOptions& o) {
    o.world_size = 2;
    o.rank = 0;
    o.rendezvous = "node0:50051";
    o.group_secret_file = "/run/secrets/group";
    o.tls_cert_file = "server.pem";
    o.tls_key_file = "server.key";
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("plaintext"));
}

TEST(WorkerOptionsTest, AGroupNeedsItsSecret) {
  absl::Status status = Check([](WorkerOptions& o) {
    o.world_size = 2;
    o.rank = 1;
    o.rendezvous = "node0:50051";
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("--group_secret_file"));
}

}  // namespace
}  // namespace distopt
