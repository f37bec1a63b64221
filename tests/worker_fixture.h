// A GoogleTest fixture that runs one real distopt_worker process on a port
// the OS picks, with a Client to drive it, plus small tensor helpers and the
// waits and calls that several daemon tests share.
#ifndef DISTOPT_TESTS_WORKER_FIXTURE_H_
#define DISTOPT_TESTS_WORKER_FIXTURE_H_

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/local_worker.h"
#include "common/tensor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/autograd.grpc.pb.h"
#include "proto/distopt/v1/parameter.grpc.pb.h"

namespace distopt {
namespace testing {

// The secret of the data-parallel groups tests start.
inline constexpr char kTestGroupSecret[] = "the secret of a test group";

// Starts a worker with `flags` (a rank of a group with `group_secret`);
// fails the test if it does not come up.
inline std::unique_ptr<LocalWorker> StartWorkerOrDie(
    std::vector<std::string> flags = {}, std::string group_secret = "",
    std::vector<std::string> launcher = {}) {
  LocalWorkerOptions options;
  options.flags = std::move(flags);
  options.group_secret = std::move(group_secret);
  options.launcher = std::move(launcher);
  absl::StatusOr<std::unique_ptr<LocalWorker>> worker =
      LocalWorker::Start(options);
  EXPECT_TRUE(worker.ok()) << worker.status();
  return worker.ok() ? *std::move(worker) : nullptr;
}

// Starts a rank of a test group (the group's secret given).
inline std::unique_ptr<LocalWorker> StartRankOrDie(
    std::vector<std::string> flags, std::vector<std::string> launcher = {}) {
  return StartWorkerOrDie(std::move(flags), kTestGroupSecret,
                          std::move(launcher));
}

// An address a worker can listen on again and again (restarted after a
// SIGKILL, say): the one a first worker had; empty (the test has failed)
// when it did not come up or stop.
inline std::string ReusableAddress() {
  std::unique_ptr<LocalWorker> first = StartWorkerOrDie();
  if (first == nullptr) return "";
  const std::string address = first->address();
  absl::StatusOr<int> code = first->Stop();
  EXPECT_TRUE(code.ok() && *code == 0);
  return address;
}

// A message's bytes, the same for the same contents (maps in key order).
inline std::string CanonicalBytes(
    const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return bytes;
}

// A worker on the checkpoint folder `dir` after a restart: a first worker
// on it is given to `before`, then stopped gracefully, and a second started.
// nullptr (the test has failed) when a worker does not come up, `before`
// fails fatally, or the first does not exit with code 0.
inline std::unique_ptr<LocalWorker> RestartedOnCheckpointDir(
    const std::string& dir,
    const std::function<void(Client& client, const std::string& address)>&
        before) {
  const std::vector<std::string> flags = {"--checkpoint_dir=" + dir};
  {
    std::unique_ptr<LocalWorker> worker = StartWorkerOrDie(flags);
    if (worker == nullptr) return nullptr;
    {
      Client client;
      before(client, worker->address());
    }
    if (::testing::Test::HasFatalFailure()) return nullptr;
    absl::StatusOr<int> code = worker->Stop();
    EXPECT_TRUE(code.ok()) << code.status();
    if (!code.ok()) return nullptr;
    EXPECT_EQ(*code, 0);
    if (*code != 0) return nullptr;
  }
  return StartWorkerOrDie(flags);
}

// The path of a test optimizer plugin of server/optim/plugins, which the
// test lists in its data.
inline std::string PluginPath(const std::string& name) {
  return std::string(std::getenv("TEST_SRCDIR")) +
         "/distopt/server/optim/plugins/" + name;
}

// Polls `condition` until it holds (true) or `timeout` has passed (false):
// a test waits for what it needs, not a fixed time that a busy machine may
// overrun.
inline bool PollUntil(const std::function<bool()>& condition,
                      absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

// One page of the worker's autograd contexts, through the generated gRPC client
// (the client library does not list them); fails the test if the call fails.
inline v1::ListContextsResponse ListContexts(Client& client,
                                             const std::string& address,
                                             int page_size = 0,
                                             const std::string& token = "") {
  auto stub = v1::AutogradService::NewStub(client.Channel(address));
  v1::ListContextsRequest request;
  request.set_page_size(page_size);
  request.set_page_token(token);
  grpc::ClientContext context;
  v1::ListContextsResponse response;
  grpc::Status status = stub->ListContexts(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

// A host float32 tensor of `shape` holding start, start + step, ...
inline Tensor Ramp(const Shape& shape, float start = 0, float step = 1) {
  Tensor t = *Tensor::AllocateHost(DType::kFloat32, shape);
  float value = start;
  for (float& x : t.host_span<float>()) {
    x = value;
    value += step;
  }
  return t;
}

inline bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), a.byte_size()) == 0;
}

// The exit code of a daemon built with --config=asan when AddressSanitizer,
// UndefinedBehaviorSanitizer or LeakSanitizer reported an error
// (LSAN_OPTIONS=exitcode=23 in .bazelrc, which the other two use too).
inline constexpr int kSanitizerExitCode = 23;

// Stops `worker` (if it still runs) and fails the test when it exited
// with the sanitizers' code: the report is in the test's log above. A
// daemon stopped by its destructor alone would hide it.
inline void StopAndCheckSanitizers(LocalWorker& worker) {
  absl::StatusOr<int> code = worker.Stop();
  EXPECT_TRUE(code.ok()) << code.status();
  if (code.ok()) {
    EXPECT_NE(*code, kSanitizerExitCode)
        << "distopt_worker " << worker.pid()
        << ": a sanitizer reported an error (its report is above)";
  }
}

class WorkerTest : public ::testing::Test {
 protected:
  // Flags for the worker; override to configure it.
  virtual std::vector<std::string> WorkerFlags() const { return {}; }
  // The group's secret, for a worker that is a rank of a group.
  virtual std::string GroupSecret() const { return ""; }

  void SetUp() override {
    worker_ = StartWorkerOrDie(WorkerFlags(), GroupSecret());
    ASSERT_NE(worker_, nullptr);
    address_ = worker_->address();
  }
  void TearDown() override {
    if (worker_ != nullptr) StopAndCheckSanitizers(*worker_);
  }

  // ParameterService through the generated gRPC client, for requests the client
  // library would never send.
  std::unique_ptr<v1::ParameterService::Stub> ParameterServiceClient() {
    return v1::ParameterService::NewStub(client_.Channel(address_));
  }

  // Sends raw write requests, as a buggy or hostile client might.
  grpc::Status RawWrite(
      const std::vector<v1::WriteParameterRequest>& messages) {
    grpc::ClientContext context;
    v1::ParameterInfo response;
    auto writer = ParameterServiceClient()->WriteParameter(&context, &response);
    for (const auto& message : messages) {
      if (!writer->Write(message)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // Declared first so that it is destroyed last: the client's idle
  // connections close first, and the daemon then stops at once instead of
  // waiting for the client to notice its GOAWAY.
  std::unique_ptr<LocalWorker> worker_;
  std::string address_;
  Client client_;
};

}  // namespace testing
}  // namespace distopt

#endif  // DISTOPT_TESTS_WORKER_FIXTURE_H_
