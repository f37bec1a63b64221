// GroupService on a real daemon: the group it was started in, and the
// key-value store that bootstraps collectives.
#include <thread>

#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/group.grpc.pb.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class GroupServiceTest : public testing::WorkerTest {
 protected:
  std::vector<std::string> WorkerFlags() const override {
    return {"--rank=1", "--world_size=3",
            "--peers=127.0.0.1:1001,127.0.0.1:1002"};
  }
  std::unique_ptr<v1::GroupService::Stub> Stub() {
    return v1::GroupService::NewStub(client_.Channel(address_));
  }
};

TEST_F(GroupServiceTest, ReportsTheGroupFromTheFlags) {
  grpc::ClientContext context;
  v1::GroupInfo info;
  ASSERT_TRUE(Stub()->GetGroup(&context, v1::GetGroupRequest(), &info).ok());
  EXPECT_EQ(info.rank(), 1);
  EXPECT_EQ(info.world_size(), 3);
  EXPECT_THAT(info.peers(), ElementsAre("127.0.0.1:1001", "127.0.0.1:1002"));
  EXPECT_EQ(info.backend(), "gloo");
}

TEST_F(GroupServiceTest, StoreSetsGetsWaitsAndCounts) {
  auto stub = Stub();
  {
    grpc::ClientContext context;
    v1::GetRequest get;
    get.set_key("nccl/unique_id");
    v1::GetResponse value;
    EXPECT_EQ(stub->Get(&context, get, &value).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  // A waiter blocks until another rank sets the key.
  std::thread waiter([&] {
    grpc::ClientContext context;
    v1::WaitRequest wait;
    wait.add_keys("nccl/unique_id");
    wait.set_timeout_ms(30000);
    v1::WaitResponse done;
    EXPECT_TRUE(Stub()->Wait(&context, wait, &done).ok());
  });
  {
    grpc::ClientContext context;
    v1::SetRequest set;
    set.set_key("nccl/unique_id");
    set.set_value(std::string("\x01\x02\x00\x03", 4));
    v1::SetResponse done;
    ASSERT_TRUE(stub->Set(&context, set, &done).ok());
  }
  waiter.join();
  {
    grpc::ClientContext context;
    v1::GetRequest get;
    get.set_key("nccl/unique_id");
    v1::GetResponse value;
    ASSERT_TRUE(stub->Get(&context, get, &value).ok());
    EXPECT_EQ(value.value(), std::string("\x01\x02\x00\x03", 4));
  }
  for (int expected : {1, 2, 3}) {
    grpc::ClientContext context;
    v1::AddRequest add;
    add.set_key("joined");
    add.set_delta(1);
    v1::AddResponse value;
    ASSERT_TRUE(stub->Add(&context, add, &value).ok());
    EXPECT_EQ(value.value(), expected);
  }
}

TEST_F(GroupServiceTest, WaitTimesOutAndBadTimeoutsAreRefused) {
  auto stub = Stub();
  grpc::ClientContext context;
  v1::WaitRequest wait;
  wait.add_keys("rank2/ready");
  wait.set_timeout_ms(100);
  v1::WaitResponse done;
  grpc::Status status = stub->Wait(&context, wait, &done);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(status.error_message(), HasSubstr("rank2/ready not set"));
  grpc::ClientContext again;
  wait.set_timeout_ms(0);
  status = stub->Wait(&again, wait, &done);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("timeout_ms"));
}

}  // namespace
}  // namespace distopt
