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
      {[](WorkerOptions& o) { o.checkpoint_keep = -1; },
       "--checkpoint_keep=-1"},
      {[](WorkerOptions& o) {
         o.checkpoint_dir = "/tmp/c";
         o.checkpoint_every_steps = -2;
       },
       "--checkpoint_every_steps=-2"},
      {[](WorkerOptions& o) {
         o.checkpoint_dir = "/tmp/c";
         o.checkpoint_interval = absl::Seconds(-1);
       },
       "--checkpoint_interval=-1s"},
      {[](WorkerOptions& o) {
         o.checkpoint_dir = "/tmp/c";
         o.checkpoint_interval = absl::Nanoseconds(1);
       },
       "--checkpoint_interval=1ns: expected 0 (off) or at least 100ms"},
      {[](WorkerOptions& o) { o.checkpoint_every_steps = 10; },
       "need --checkpoint_dir"},
      {[](WorkerOptions& o) { o.checkpoint_interval = absl::Minutes(5); },
       "need --checkpoint_dir"},
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
      {[](WorkerOptions& o) { o.streams.per_connection = 200; },
       "--max_streams_per_connection=200"},
      {[](WorkerOptions& o) {
         o.streams.stall_timeout = absl::Milliseconds(5);
       },
       "--stream_stall_timeout=5ms"},
      {[](WorkerOptions& o) { o.max_threads = 100; },
       "--max_threads=100: expected at least 144"},
      {[](WorkerOptions& o) {
         o.world_size = 2;
         o.rendezvous = "etcd://node1:2379";
       },
       "--rendezvous=etcd://node1:2379: no job name; expected "
       "etcd://HOST:PORT/JOB"},
      {[](WorkerOptions& o) { o.rank_hold_ttl = absl::Seconds(1); },
       "--rank_hold_ttl=1s: expected 2s to 10m"},
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
  EXPECT_TRUE(Check([](WorkerOptions& o) {
                o.world_size = 4;
                o.rank = 0;
                o.rendezvous = "etcd://etcd.cluster:2379/job-17";
                o.rank_hold_ttl = absl::Seconds(30);
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

// The threads above --max_streams serve the calls without a slot: short
// calls, and on rank 0 one store Wait per other rank.
TEST(WorkerOptionsTest, ThreadsLeaveRoomForShortCallsAndStoreWaits) {
  auto small = [](WorkerOptions& o) {
    o.streams.total = 32;
    o.streams.per_connection = 8;
    o.max_threads = 48;
  };
  EXPECT_TRUE(Check(small).ok());
  const absl::Status status = Check([](WorkerOptions& o) {
    o.streams.total = 32;
    o.streams.per_connection = 8;
    o.max_threads = 48;
    o.world_size = 3;
    o.peers = {"10.0.0.1:50051", "10.0.0.2:50051"};
    o.group_secret_file = "/run/secrets/group";
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("--max_threads=48: expected at least 50"));
}

// Left at 0, the thread limit grows with the group: a large group starts
// with the default flags.
TEST(WorkerOptionsTest, TheDefaultThreadLimitFitsAnyGroup) {
  EXPECT_EQ(ThreadLimit(WorkerOptions()), 256);
  auto large_group = [](WorkerOptions& o) {
    o.world_size = 300;
    o.rank = 1;
    o.rendezvous = "10.0.0.1:50051";
    o.group_secret_file = "/run/secrets/group";
  };
  EXPECT_TRUE(Check(large_group).ok());
  WorkerOptions options;
  large_group(options);
  EXPECT_EQ(ThreadLimit(options), 128 + 16 + 299);
}

}  // namespace
}  // namespace distopt
