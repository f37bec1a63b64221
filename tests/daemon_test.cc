// The daemon as a process: start-up reporting, flags, device selection,
// health, reflection and graceful shutdown.
#include <signal.h>
#include <stdio.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/local_worker.h"
#include "common/cuda_ops.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tests/proto/reflection_v1alpha.grpc.pb.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::Ramp;
using ::distopt::testing::SameBytes;
using ::distopt::testing::StartWorkerOrDie;
using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::testing::Contains;
using ::testing::HasSubstr;

bool GpuPresent() {
  int count = 0;
  return cuda_ops::BuiltWithCuda() && cuda_ops::DeviceCount(&count).empty() &&
         count > 0;
}

// Runs the worker binary with `flags`, returning its exit code and what it
// printed (stdout and stderr).
int RunWorker(const std::string& flags, std::string* output) {
  const std::string command = *FindWorkerBinary() + " " + flags + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) output->append(buffer);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(DaemonTest, ReportsTheBoundPortInOneParseableLine) {
  const std::string command = *FindWorkerBinary() + " --listen=127.0.0.1:0";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[512];
  ASSERT_NE(fgets(buffer, sizeof(buffer), pipe), nullptr);
  const std::string line = buffer;
  EXPECT_TRUE(absl::StartsWith(line, "distopt_worker listening ")) << line;
  int port = 0;
  int pid = 0;
  for (absl::string_view field : absl::StrSplit(line, ' ')) {
    field = absl::StripAsciiWhitespace(field);
    if (absl::ConsumePrefix(&field, "port=")) {
      ASSERT_TRUE(absl::SimpleAtoi(field, &port));
    }
    if (absl::ConsumePrefix(&field, "pid=")) {
      ASSERT_TRUE(absl::SimpleAtoi(field, &pid));
    }
  }
  EXPECT_GT(port, 0);
  EXPECT_THAT(line, HasSubstr("address=127.0.0.1:" + std::to_string(port)));
  // The port is real: a client can use it.
  Client client;
  EXPECT_TRUE(client.ListParameters("127.0.0.1:" + std::to_string(port)).ok());
  ASSERT_GT(pid, 0);
  kill(pid, SIGTERM);
  EXPECT_EQ(pclose(pipe), 0);
}

TEST(DaemonTest, BadFlagsExitWithCode2AndSaySo) {
  // Values refused by the daemon; values that do not parse and unknown
  // flags, refused by Abseil's parser (whose own code is 1); an argument
  // that is not a flag (a flag without its dashes).
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--listen=127.0.0.1:0 --rank=3 --world_size=2 --peers=127.0.0.1:1",
       "--rank=3: expected 0 to 1"},
      {"--listen=127.0.0.1:0 --device=tpu", "expected cpu or cuda:N"},
      {"--listen=nonsense", "--listen=nonsense"},
      {"--listen=127.0.0.1:0 --checkpoint_keep=abc", "checkpoint_keep"},
      {"--listen=127.0.0.1:0 --checkpoint_every_steps=1k",
       "checkpoint_every_steps"},
      {"--listen=127.0.0.1:0 --no_such_flag=1", "no_such_flag"},
      {"listen=127.0.0.1:0", "argument listen=127.0.0.1:0: not a flag"}};
  std::string output;
  for (const auto& [flags, why] : refused) {
    output.clear();
    EXPECT_EQ(RunWorker(flags, &output), 2) << flags;
    EXPECT_THAT(output, HasSubstr(why)) << flags;
  }
  // Asking for help is not a bad flag.
  output.clear();
  EXPECT_NE(RunWorker("--help", &output), 2);
  EXPECT_THAT(output, HasSubstr("--checkpoint_interval"));
}

TEST(DaemonTest, AddressInUseExitsWithCode4) {
  std::unique_ptr<LocalWorker> first = StartWorkerOrDie();
  ASSERT_NE(first, nullptr);
  std::string output;
  EXPECT_EQ(RunWorker("--listen=" + first->address(), &output), 4);
  EXPECT_THAT(output, HasSubstr("cannot listen"));
}

TEST(DaemonTest, CudaDeviceWithoutGpuFailsAtStartUp) {
  if (GpuPresent()) GTEST_SKIP() << "a GPU is present";
  std::string output;
  EXPECT_EQ(RunWorker("--listen=127.0.0.1:0 --device=cuda:0", &output), 3);
  EXPECT_THAT(output, HasSubstr("cuda:0"));
  EXPECT_THAT(output, HasSubstr("--device=cpu"));
}

TEST(DaemonTest, CudaDeviceKeepsParametersOnTheGpu) {
  if (!GpuPresent()) GTEST_SKIP() << "no CUDA GPU on this machine";
  std::unique_ptr<LocalWorker> worker = StartWorkerOrDie({"--device=cuda:0"});
  ASSERT_NE(worker, nullptr);
  Client client;
  Tensor values = Ramp({3 << 20}, 0.5f, 0.25f);
  absl::StatusOr<RemoteParameter> p =
      client.CreateParameterFrom(worker->address(), "gpu", values);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(client.GetParameter(*p)->device, Device::Cuda(0));
  EXPECT_TRUE(SameBytes(*client.ReadParameter(*p), values));
  absl::StatusOr<RemoteParameter> c = client.CreateParameter(
      worker->address(), "c", DType::kFloat32, {1000}, init::Constant(2));
  ASSERT_TRUE(c.ok());
  for (float v : client.ReadParameter(*c)->host_span<float>()) {
    ASSERT_EQ(v, 2.0f);
  }
}

TEST(DaemonTest, CheckpointDirSurvivesARestart) {
  const Tensor values = Ramp({1000}, 0.5f, 0.125f);
  uint64_t first_id = 0;
  std::unique_ptr<LocalWorker> worker = testing::RestartedOnCheckpointDir(
      std::string(std::getenv("TEST_TMPDIR")) + "/ckpt",
      [&](Client& client, const std::string& address) {
        absl::StatusOr<RemoteParameter> p =
            client.CreateParameter(address, "kept", DType::kFloat32, {1000});
        ASSERT_TRUE(p.ok());
        first_id = p->id;
        ASSERT_TRUE(client.WriteParameter(*p, values).ok());
      });
  ASSERT_NE(worker, nullptr);
  Client client;
  absl::StatusOr<RemoteParameter> p =
      client.FindParameter(worker->address(), "kept");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->id, first_id);
  EXPECT_EQ(client.GetParameter(*p)->version, 2u);
  EXPECT_TRUE(SameBytes(*client.ReadParameter(*p), values));
  absl::StatusOr<RemoteParameter> next =
      client.CreateParameter(worker->address(), "next", DType::kFloat32, {1});
  ASSERT_TRUE(next.ok());
  EXPECT_GT(next->id, first_id);
}

TEST(DaemonTest, DamagedCheckpointExitsWithCode5) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/bad";
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/parameters && echo junk > " +
                         dir + "/parameters/index.binpb")
                            .c_str()),
            0);
  std::string output;
  EXPECT_EQ(RunWorker("--listen=127.0.0.1:0 --checkpoint_dir=" + dir, &output),
            5);
  EXPECT_THAT(output, HasSubstr("damaged"));
}

TEST(DaemonTest, AnUnwritableCheckpointDirIsRefusedAtStartUp) {
  const std::string file = std::string(std::getenv("TEST_TMPDIR")) + "/file";
  ASSERT_EQ(std::system(("echo not a folder > " + file).c_str()), 0);
  std::string output;
  EXPECT_EQ(RunWorker("--listen=127.0.0.1:0 --checkpoint_dir=" + file, &output),
            2);
  EXPECT_THAT(output, HasSubstr("--checkpoint_dir=" + file));
  // A folder that exists but cannot be written, even by root.
  EXPECT_EQ(
      RunWorker("--listen=127.0.0.1:0 --checkpoint_dir=/proc/self", &output),
      2);
  EXPECT_THAT(output, HasSubstr("cannot write into it"));
}

// Two clean stops save two checkpoints; damage to the newest makes the
// next start restore the previous one (its log says why; checkpoint_test
// checks the reasons).
TEST(DaemonTest, ADamagedNewestCheckpointFallsBackToThePrevious) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/twice";
  const Tensor first = Ramp({64}, 1.0f, 1.0f);
  std::unique_ptr<LocalWorker> worker = testing::RestartedOnCheckpointDir(
      dir, [&](Client& client, const std::string& address) {
        ASSERT_TRUE(client.CreateParameterFrom(address, "kept", first).ok());
      });
  ASSERT_NE(worker, nullptr);
  Client client;
  RemoteParameter kept = *client.FindParameter(worker->address(), "kept");
  ASSERT_TRUE(client.WriteParameter(kept, Ramp({64}, -1.0f, 0.5f)).ok());
  ASSERT_EQ(*worker->Stop(), 0);  // The newest checkpoint: the write.
  // Damage the newest values.
  const std::string values = dir + "/parameters/values.bin";
  ASSERT_EQ(std::system(("printf 'XXXX' | dd of=" + values +
                         " bs=1 seek=8 conv=notrunc 2>/dev/null")
                            .c_str()),
            0);
  LocalWorkerOptions options;
  options.flags = {"--checkpoint_dir=" + dir};
  absl::StatusOr<std::unique_ptr<LocalWorker>> restarted =
      LocalWorker::Start(options);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  Client again;
  RemoteParameter restored =
      *again.FindParameter((*restarted)->address(), "kept");
  EXPECT_TRUE(SameBytes(*again.ReadParameter(restored), first));
}

class HealthTest : public testing::WorkerTest {
 protected:
  std::unique_ptr<Health::Stub> HealthClient() {
    return Health::NewStub(client_.Channel(address_));
  }
};

TEST_F(HealthTest, ServingWhenReady) {
  for (const char* service : {"", "distopt.v1.ParameterService"}) {
    grpc::ClientContext context;
    HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    ASSERT_TRUE(HealthClient()->Check(&context, request, &response).ok())
        << service;
    EXPECT_EQ(response.status(), HealthCheckResponse::SERVING) << service;
  }
  grpc::ClientContext context;
  HealthCheckRequest request;
  request.set_service("no.such.Service");
  HealthCheckResponse response;
  EXPECT_EQ(HealthClient()->Check(&context, request, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(HealthTest, WatchSeesNotServingDuringShutdownThenTheDaemonExits0) {
  grpc::ClientContext context;
  HealthCheckRequest request;
  auto reader = HealthClient()->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  worker_->Signal(SIGTERM);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&response));
  reader->Finish().IgnoreError();
  absl::StatusOr<int> code = worker_->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

class ShutdownTest : public testing::WorkerTest {};

TEST_F(ShutdownTest, InFlightCallsFinishAfterSigterm) {
  absl::StatusOr<RemoteParameter> p =
      client_.CreateParameter(address_, "p", DType::kFloat32, {4});
  ASSERT_TRUE(p.ok());
  const Tensor values = Ramp({4}, 7.0f);
  const char* bytes = static_cast<const char*>(values.data());

  grpc::ClientContext context;
  v1::ParameterInfo response;
  auto writer = ParameterServiceClient()->WriteParameter(&context, &response);
  v1::WriteParameterRequest first;
  first.mutable_parameter()->set_id(p->id);
  first.set_offset(0);
  first.set_data(bytes, 8);
  ASSERT_TRUE(writer->Write(first));
  absl::SleepFor(absl::Milliseconds(100));  // The call is now in flight.

  worker_->Signal(SIGTERM);
  absl::SleepFor(absl::Milliseconds(300));
  // Still running: it waits for the write to end.
  EXPECT_EQ(worker_->Wait(absl::Milliseconds(1)).status().code(),
            absl::StatusCode::kDeadlineExceeded);

  v1::WriteParameterRequest second;
  second.set_offset(8);
  second.set_data(bytes + 8, 8);
  ASSERT_TRUE(writer->Write(second));
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.version(), 2u);

  absl::StatusOr<int> code = worker_->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

TEST_F(ShutdownTest, SigintAlsoExits0) {
  worker_->Signal(SIGINT);
  absl::StatusOr<int> code = worker_->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

// What grpcurl does: list the services, then fetch the descriptors of a
// method through grpc.reflection.v1alpha.ServerReflection.
class ReflectionTest : public testing::WorkerTest {};

TEST_F(ReflectionTest, ListsServicesAndDescribesAMethod) {
  using grpc::reflection::v1alpha::ServerReflection;
  using grpc::reflection::v1alpha::ServerReflectionRequest;
  using grpc::reflection::v1alpha::ServerReflectionResponse;
  auto stub = ServerReflection::NewStub(client_.Channel(address_));
  grpc::ClientContext context;
  auto stream = stub->ServerReflectionInfo(&context);

  ServerReflectionRequest list;
  list.set_list_services("*");
  ASSERT_TRUE(stream->Write(list));
  ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_list_services_response());
  std::vector<std::string> services;
  for (const auto& service : response.list_services_response().service()) {
    services.push_back(service.name());
  }
  EXPECT_THAT(services, Contains("distopt.v1.ParameterService"));
  EXPECT_THAT(services, Contains("grpc.health.v1.Health"));
  EXPECT_THAT(services, Contains("grpc.reflection.v1alpha.ServerReflection"));

  // Resolve every file the symbols need into one pool, as grpcurl does.
  google::protobuf::DescriptorPool pool;
  auto resolve = [&](const std::string& symbol) {
    ServerReflectionRequest request;
    request.set_file_containing_symbol(symbol);
    EXPECT_TRUE(stream->Write(request));
    ServerReflectionResponse reply;
    EXPECT_TRUE(stream->Read(&reply));
    EXPECT_TRUE(reply.has_file_descriptor_response()) << symbol;
    // Dependencies may come after their users: add until nothing changes.
    std::vector<google::protobuf::FileDescriptorProto> files;
    for (const std::string& bytes :
         reply.file_descriptor_response().file_descriptor_proto()) {
      files.emplace_back();
      EXPECT_TRUE(files.back().ParseFromString(bytes));
    }
    for (size_t round = 0; round < files.size(); ++round) {
      for (const auto& file : files) {
        if (pool.FindFileByName(file.name()) != nullptr) continue;
        bool ready = true;
        for (const std::string& dependency : file.dependency()) {
          ready = ready && pool.FindFileByName(dependency) != nullptr;
        }
        if (ready) pool.BuildFile(file);
      }
    }
  };
  resolve("distopt.v1.ParameterService");
  const google::protobuf::MethodDescriptor* write =
      pool.FindMethodByName("distopt.v1.ParameterService.WriteParameter");
  ASSERT_NE(write, nullptr);
  EXPECT_TRUE(write->client_streaming());
  EXPECT_FALSE(write->server_streaming());
  EXPECT_EQ(write->input_type()->full_name(),
            "distopt.v1.WriteParameterRequest");
  EXPECT_NE(write->input_type()->FindFieldByName("offset"), nullptr);
  const google::protobuf::MethodDescriptor* read =
      pool.FindMethodByName("distopt.v1.ParameterService.ReadParameter");
  ASSERT_NE(read, nullptr);
  EXPECT_TRUE(read->server_streaming());

  resolve("grpc.health.v1.Health");
  EXPECT_NE(pool.FindMethodByName("grpc.health.v1.Health.Watch"), nullptr);

  ServerReflectionRequest unknown;
  unknown.set_file_containing_symbol("distopt.v1.NoSuchService");
  ASSERT_TRUE(stream->Write(unknown));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_TRUE(response.has_error_response());
  stream->WritesDone();
  stream->Finish().IgnoreError();
}

}  // namespace
}  // namespace distopt
