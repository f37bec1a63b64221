// Defects found by probing ParameterService as a hostile or unlucky client
// would (issue 12), each through a real daemon: versions handed to
// concurrent writers, ids after a restart, writes that name a shape but no
// dtype, constants a dtype cannot hold, huge page tokens, reads during
// writes.
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/parameter.grpc.pb.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::Ramp;
using ::testing::HasSubstr;
using ::testing::SizeIs;

using ParameterHardeningTest = testing::WorkerTest;

// Each concurrent writer is told the version its own write produced: no two
// writers get the same one, and together they got every version. The
// writers share one channel: its calls still run on the daemon's threads
// side by side, and sixteen channels dialling at once under ASan once lost
// a connect to the sandbox (UNAVAILABLE before any call was made).
TEST_F(ParameterHardeningTest, EachWriterGetsTheVersionItsWriteMade) {
  absl::StatusOr<RemoteParameter> p =
      client_.CreateParameter(address_, "contended", DType::kFloat32, {16});
  ASSERT_TRUE(p.ok()) << p.status();
  constexpr int kWriters = 16;
  constexpr int kWrites = 400;
  std::mutex mutex;
  std::vector<uint64_t> versions;
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      const Tensor values = Ramp({16}, static_cast<float>(w));
      for (int i = 0; i < kWrites; ++i) {
        absl::StatusOr<ParameterInfo> info = client_.WriteParameter(*p, values);
        ASSERT_TRUE(info.ok()) << info.status();
        std::lock_guard<std::mutex> lock(mutex);
        versions.push_back(info->version);
      }
    });
  }
  for (std::thread& writer : writers) writer.join();
  const std::set<uint64_t> distinct(versions.begin(), versions.end());
  EXPECT_EQ(distinct.size(), versions.size())
      << "a version was reported to more than one writer";
  EXPECT_EQ(*distinct.begin(), 2u);
  EXPECT_EQ(*distinct.rbegin(), 1u + kWriters * kWrites);
  EXPECT_EQ(client_.GetParameter(*p)->version, 1u + kWriters * kWrites);
}

// Ids are unique for the life of the checkpoint folder: a parameter deleted
// before a restart does not lend its id to a new one after it.
TEST(ParameterIdsTest, DeletedIdsAreNotReusedAfterARestart) {
  uint64_t deleted_id = 0;
  std::unique_ptr<LocalWorker> worker = testing::RestartedOnCheckpointDir(
      std::string(std::getenv("TEST_TMPDIR")) + "/ids",
      [&](Client& client, const std::string& address) {
        for (const char* name : {"a", "b"}) {
          ASSERT_TRUE(
              client.CreateParameter(address, name, DType::kFloat32, {2}).ok());
        }
        absl::StatusOr<RemoteParameter> x =
            client.CreateParameter(address, "x", DType::kFloat32, {2});
        ASSERT_TRUE(x.ok());
        deleted_id = x->id;
        ASSERT_TRUE(client.DeleteParameter(*x).ok());
      });
  ASSERT_NE(worker, nullptr);
  Client client;
  absl::StatusOr<RemoteParameter> y =
      client.CreateParameter(worker->address(), "y", DType::kFloat32, {2});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_GT(y->id, deleted_id);
}

// A writer that names a shape but no dtype still has the shape checked.
TEST_F(ParameterHardeningTest, AShapeWithoutADtypeIsChecked) {
  absl::StatusOr<RemoteParameter> p =
      client_.CreateParameter(address_, "four", DType::kFloat32, {4});
  ASSERT_TRUE(p.ok());
  v1::WriteParameterRequest request;
  request.mutable_parameter()->set_id(p->id);
  request.add_shape(8);
  request.set_offset(0);
  request.set_data(std::string(16, '\0'));
  grpc::Status status = RawWrite({request});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("shape: [8]"));
  EXPECT_EQ(client_.GetParameter(*p)->version, 1u);
}

// A constant the dtype cannot hold is refused instead of becoming inf.
TEST_F(ParameterHardeningTest, ConstantsBeyondTheDtypeAreRefused) {
  const std::vector<std::pair<DType, double>> too_large = {
      {DType::kFloat32, 1e300},
      {DType::kFloat16, 1e6},
      {DType::kBFloat16, -1e39},
  };
  for (const auto& [dtype, value] : too_large) {
    absl::StatusOr<RemoteParameter> p = client_.CreateParameter(
        address_, "overflow", dtype, {2}, init::Constant(value));
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument)
        << DTypeName(dtype);
    EXPECT_THAT(p.status().message(), HasSubstr("initializer.constant.value"));
  }
  // The largest finite values themselves are fine.
  EXPECT_TRUE(client_
                  .CreateParameter(address_, "max16", DType::kFloat16, {2},
                                   init::Constant(65504))
                  .ok());
  EXPECT_THAT(*client_.ListParameters(address_, ""), SizeIs(1));
}

// An error quotes a bounded prefix of what the client sent, so the client
// sees the INVALID_ARGUMENT, not a refusal of an oversized status.
TEST_F(ParameterHardeningTest, AHugePageTokenIsQuotedInPart) {
  v1::ListParametersRequest request;
  request.set_page_token(std::string(100 * 1024, 'z'));
  grpc::ClientContext context;
  v1::ListParametersResponse response;
  grpc::Status status =
      ParameterServiceClient()->ListParameters(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("page_token"));
  EXPECT_THAT(status.error_message(), HasSubstr("(102400 bytes)"));
  EXPECT_LT(status.error_message().size(), 1024u);
}

// GetParameter with values is a consistent snapshot: a reader during a
// stream of writes gets one version's values, never ABORTED.
TEST_F(ParameterHardeningTest, GetParameterReadsASnapshotDuringWrites) {
  absl::StatusOr<RemoteParameter> p =
      client_.CreateParameter(address_, "busy", DType::kFloat32, {4096});
  ASSERT_TRUE(p.ok());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    Client client;
    for (int i = 0; !stop; ++i) {
      client.WriteParameter(*p, Ramp({4096}, static_cast<float>(i), 0))
          .IgnoreError();
    }
  });
  absl::Cleanup join = [&] {
    stop = true;
    writer.join();
  };
  auto stub = ParameterServiceClient();
  std::set<float> seen;
  int reads = 0;
  for (; reads < 8000; ++reads) {
    v1::GetParameterRequest request;
    request.mutable_parameter()->set_id(p->id);
    request.set_include_values(true);
    grpc::ClientContext context;
    v1::GetParameterResponse response;
    grpc::Status status = stub->GetParameter(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    // One write's values: every element equal.
    const std::string& bytes = response.values().data();
    ASSERT_EQ(bytes.size(), 4096u * 4);
    const float* values = reinterpret_cast<const float*>(bytes.data());
    for (int e = 1; e < 4096; ++e) ASSERT_EQ(values[e], values[0]);
    seen.insert(values[0]);
  }
  EXPECT_GT(seen.size(), 1u) << "the reads did not overlap the writes";
}

}  // namespace
}  // namespace distopt
