// The daemon's structured logs, as an operator's log collector meets them:
// every line of --log_format=json is one JSON object (checked by Python's
// json module), and refused calls are logged with their code and field but
// at a bounded rate however fast a client sends them.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/local_worker.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/optimizer.grpc.pb.h"
#include "proto/distopt/v1/parameter.grpc.pb.h"
#include "server/daemon/call_observer.h"
#include "tests/group_calls.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::Ramp;
using ::testing::HasSubstr;

struct Daemon {
  FILE* stdout_pipe = nullptr;
  std::string address;
  int pid = 0;
};

// Starts the worker with its stderr in `log_path`; reads its start-up line.
Daemon StartWithLog(const std::string& flags, const std::string& log_path) {
  Daemon daemon;
  const std::string command = absl::StrCat(
      *FindWorkerBinary(), " --listen=127.0.0.1:0 ", flags, " 2>", log_path);
  daemon.stdout_pipe = popen(command.c_str(), "r");
  char buffer[512];
  if (daemon.stdout_pipe == nullptr ||
      fgets(buffer, sizeof(buffer), daemon.stdout_pipe) == nullptr) {
    return daemon;
  }
  for (absl::string_view field : absl::StrSplit(buffer, ' ')) {
    field = absl::StripAsciiWhitespace(field);
    if (absl::ConsumePrefix(&field, "address=")) {
      daemon.address = std::string(field);
    }
    if (absl::ConsumePrefix(&field, "pid=")) {
      EXPECT_TRUE(absl::SimpleAtoi(field, &daemon.pid));
    }
  }
  return daemon;
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

grpc::Status RefusedStep(Client& client, const std::string& address) {
  auto stub = v1::OptimizerService::NewStub(client.Channel(address));
  grpc::ClientContext context;
  v1::StepRequest request;
  request.set_optimizer_id(424242);
  request.set_context_id(client.NewContextId());
  v1::StepResponse response;
  return stub->Step(&context, request, &response);
}

TEST(DaemonLogsTest, JsonLinesAndRefusalsAtABoundedRate) {
  const std::string log_path =
      absl::StrCat(::testing::TempDir(), "/daemon_logs_test.log");
  Daemon daemon = StartWithLog("--log_format=json", log_path);
  ASSERT_FALSE(daemon.address.empty());
  ASSERT_GT(daemon.pid, 0);
  Client client;
  // A refusal whose message carries what the client sent: a name with a
  // quote, a backslash, a newline and a tab.
  {
    auto stub = v1::ParameterService::NewStub(client.Channel(daemon.address));
    grpc::ClientContext context;
    v1::CreateParameterRequest request;
    request.set_name("bad\"na\\me\n\t");
    request.add_shape(2);
    request.set_dtype(v1::DTYPE_FLOAT32);
    v1::ParameterInfo response;
    EXPECT_EQ(stub->CreateParameter(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  // A flood of refused calls, as fast as one client sends them.
  constexpr int kFlood = 400;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kFlood; ++i) {
    ASSERT_EQ(RefusedStep(client, daemon.address).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  const double flood_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // Later, one more: logged, saying how many were left out.
  absl::SleepFor(absl::Seconds(1));
  ASSERT_EQ(RefusedStep(client, daemon.address).error_code(),
            grpc::StatusCode::NOT_FOUND);
  kill(daemon.pid, SIGTERM);
  EXPECT_EQ(pclose(daemon.stdout_pipe), 0);

  const std::vector<std::string> lines = Lines(log_path);
  ASSERT_GE(lines.size(), 3u);
  // Every line parses as one JSON object with a time, a level and a msg.
  const std::string check = absl::StrCat(
      "/usr/bin/python3 -c 'import json,sys\n"
      "for n, line in enumerate(open(sys.argv[1], encoding=\"utf-8\")):\n"
      "  o = json.loads(line)\n"
      "  assert isinstance(o, dict) and {\"time\", \"level\", \"msg\"} <= "
      "o.keys(), n\n' ",
      log_path);
  EXPECT_EQ(std::system(check.c_str()), 0) << "not JSON lines: " << log_path;

  int refused = 0;
  bool said_how_many = false;
  bool named_the_field = false;
  for (const std::string& line : lines) {
    if (!absl::StrContains(line, "\"msg\":\"call refused\"")) continue;
    ++refused;
    EXPECT_THAT(line, HasSubstr("\"code\":"));
    if (absl::StrContains(line, "\"refusals_not_logged\":")) {
      said_how_many = true;
    }
    if (absl::StrContains(line, "INVALID_ARGUMENT") &&
        absl::StrContains(line, "name")) {
      named_the_field = true;
    }
  }
  const double allowed =
      CallObserverFactory::kRefusalBurst +
      CallObserverFactory::kRefusalsPerSecond * (flood_seconds + 1.5);
  std::printf("%d of %d refusals logged in %.2f s (at most %.0f allowed)\n",
              refused, kFlood + 2, flood_seconds, allowed);
  EXPECT_LE(refused, allowed);
  EXPECT_GE(refused, CallObserverFactory::kRefusalBurst);
  EXPECT_TRUE(said_how_many);
  EXPECT_TRUE(named_the_field);
}

// The value of `name` with labels service OptimizerService, method Step
// and `code` in the daemon's metrics (a histogram's count when no code);
// -1 when it has none.
double StepCalls(Client& client, const std::string& address,
                 const std::string& name, const std::string& code = "") {
  v1::GetStatusRequest request;
  request.set_metric_prefix(name);
  absl::StatusOr<v1::WorkerStatus> status = client.GetStatus(address, request);
  EXPECT_TRUE(status.ok()) << status.status();
  if (!status.ok()) return -1;
  for (const v1::Metric& metric : status->metrics()) {
    const auto& labels = metric.labels();
    auto label = [&](const std::string& key) {
      auto it = labels.find(key);
      return it == labels.end() ? std::string() : it->second;
    };
    if (metric.name() != name ||
        label("service") != "distopt.v1.OptimizerService" ||
        label("method") != "Step" || label("code") != code) {
      continue;
    }
    return code.empty() ? static_cast<double>(metric.count()) : metric.value();
  }
  return -1;
}

// The client library sends steps over one StepStream per worker: each of
// them is still a Step call to the operator, counted by its outcome's code
// and timed in the metrics (which distoptctl top reads), and logged when
// refused, as a unary Step would be.
TEST(DaemonLogsTest, StepsOverAStreamAreStepCalls) {
  const std::string log_path =
      absl::StrCat(::testing::TempDir(), "/daemon_logs_stream.log");
  Daemon daemon = StartWithLog("", log_path);
  ASSERT_FALSE(daemon.address.empty());
  Client client;
  absl::StatusOr<RemoteParameter> weight =
      client.CreateParameterFrom(daemon.address, "weight", Ramp({8, 4}));
  ASSERT_TRUE(weight.ok()) << weight.status();
  absl::StatusOr<v1::OptimizerInfo> sgd = client.CreateOptimizer(
      daemon.address, "sgd", {{"lr", hyper::Number(0.1)}}, {weight->id});
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  constexpr int kSteps = 3;
  for (int step = 0; step < kSteps; ++step) {
    const uint64_t context_id = client.NewContextId();
    ASSERT_TRUE(client
                    .AccumulateGradients(daemon.address, context_id,
                                         {{weight->id, Ramp({8, 4}, step)}})
                    .ok());
    absl::StatusOr<v1::StepResponse> stepped =
        client.Step(daemon.address, sgd->id(), context_id);
    ASSERT_TRUE(stepped.ok() && stepped->applied()) << stepped.status();
  }
  // Refused over the same stream: an optimizer the daemon never had.
  absl::StatusOr<v1::StepResponse> refused =
      client.Step(daemon.address, 777001, client.NewContextId());
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kNotFound)
      << refused.status();

  EXPECT_EQ(StepCalls(client, daemon.address, "distopt_rpcs_total", "OK"),
            kSteps);
  EXPECT_EQ(
      StepCalls(client, daemon.address, "distopt_rpcs_total", "NOT_FOUND"), 1);
  EXPECT_EQ(StepCalls(client, daemon.address, "distopt_rpc_duration_seconds"),
            kSteps + 1);
  kill(daemon.pid, SIGTERM);
  EXPECT_EQ(pclose(daemon.stdout_pipe), 0);
  bool logged = false;
  for (const std::string& line : Lines(log_path)) {
    if (absl::StrContains(line, "call refused") &&
        absl::StrContains(line, "method=distopt.v1.OptimizerService/Step ") &&
        absl::StrContains(line, "777001")) {
      logged = true;
    }
  }
  EXPECT_TRUE(logged) << "no refusal of the streamed step in " << log_path;
}

// Rank 0 serves the group's store, which the other ranks poll while they
// wait for each other: a lookup that finds nothing yet is the store's
// answer, not a refused call, and is not logged as one. Rank 2 comes a
// second after rank 1, which meanwhile polls rank 0's store for rank 2's
// address in slices of 200 ms.
TEST(DaemonLogsTest, StoreLookupsThatFindNothingAreNotRefusals) {
  const std::string log_path =
      absl::StrCat(::testing::TempDir(), "/daemon_logs_store.log");
  const std::string secret_path =
      absl::StrCat(::testing::TempDir(), "/daemon_logs_secret");
  std::ofstream(secret_path) << testing::kTestGroupSecret;
  Daemon rank0 = StartWithLog(
      "--rank=0 --world_size=3 --rendezvous=127.0.0.1:1 "
      "--group_secret_file=" +
          secret_path,
      log_path);
  ASSERT_FALSE(rank0.address.empty());
  std::vector<std::unique_ptr<LocalWorker>> others;
  for (int r : {1, 2}) {
    if (r == 2) absl::SleepFor(absl::Seconds(1));
    others.push_back(
        testing::StartRankOrDie({absl::StrCat("--rank=", r), "--world_size=3",
                                 "--rendezvous=" + rank0.address}));
    ASSERT_NE(others.back(), nullptr);
  }
  Client client;
  for (const auto& rank : others) {
    EXPECT_EQ(
        testing::GroupAfterJoining(client, rank->address(), absl::Seconds(30))
            .state(),
        v1::GroupInfo::READY);
  }
  for (const auto& rank : others) ASSERT_TRUE(rank->Stop().ok());
  kill(rank0.pid, SIGTERM);
  EXPECT_EQ(pclose(rank0.stdout_pipe), 0);
  bool connected = false;
  for (const std::string& line : Lines(log_path)) {
    EXPECT_THAT(line, ::testing::Not(HasSubstr("GroupService/Wait")));
    EXPECT_THAT(line, ::testing::Not(HasSubstr("GroupService/Get")));
    connected = connected || absl::StrContains(line, "group round connected");
  }
  EXPECT_TRUE(connected);
}

TEST(DaemonLogsTest, TextLinesAreLogfmt) {
  const std::string log_path =
      absl::StrCat(::testing::TempDir(), "/daemon_logs_text.log");
  Daemon daemon = StartWithLog("", log_path);
  ASSERT_GT(daemon.pid, 0);
  kill(daemon.pid, SIGTERM);
  EXPECT_EQ(pclose(daemon.stdout_pipe), 0);
  const std::vector<std::string> lines = Lines(log_path);
  ASSERT_FALSE(lines.empty());
  for (const std::string& line : lines) {
    EXPECT_TRUE(absl::StartsWith(line, "time=")) << line;
    EXPECT_THAT(line, HasSubstr(" level=info msg=\"")) << line;
  }
  EXPECT_THAT(lines[0], HasSubstr("msg=\"serving\" address=" + daemon.address));
}

TEST(DaemonLogsTest, ABadLogFormatIsRefusedNamingTheFlag) {
  const std::string command =
      *FindWorkerBinary() + " --listen=127.0.0.1:0 --log_format=xml 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_THAT(output, HasSubstr("--log_format=xml: expected text or json"));
}

}  // namespace
}  // namespace distopt
