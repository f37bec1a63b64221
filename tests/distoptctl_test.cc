// distoptctl, the operators' tool, run as a subprocess against real
// daemons: each command, its --json output read back, a dead address and a
// wrong token.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "client/hyperparameters.h"
#include "client/local_worker.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/group_calls.h"
#include "tests/test_certificates.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::Ramp;
using ::google::protobuf::Value;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::StartsWith;

// distoptctl in the test's runfiles (data = ["//tools/distoptctl"]).
std::string DistoptctlBinary() {
  return std::string(std::getenv("TEST_SRCDIR")) +
         "/distopt/tools/distoptctl/distoptctl";
}

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
  // stderr's lines.
  std::vector<std::string> ErrorLines() const {
    return absl::StrSplit(err, '\n', absl::SkipEmpty());
  }
};

// Runs distoptctl with `arguments` and waits for it.
Outcome Distoptctl(const std::vector<std::string>& arguments) {
  static int runs = 0;
  const std::string err_file =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/distoptctl_stderr_", runs++);
  std::string command = DistoptctlBinary();
  for (const std::string& argument : arguments) {
    absl::StrAppend(&command, " '", argument, "'");
  }
  absl::StrAppend(&command, " 2>", err_file);
  Outcome run;
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << command;
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    run.out.append(buffer, n);
  }
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.err = testing::ReadTestFile(err_file);
  return run;
}

// A JSON document; the test fails when it does not parse.
Value ParseJson(const std::string& text) {
  Value value;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &value);
  EXPECT_TRUE(status.ok()) << status.ToString() << ": " << text;
  return value;
}

// The value at `path` ("workers/0/address") of a document; null when there
// is none.
Value At(const Value& root, const std::string& path) {
  Value value = root;
  for (const std::string& step :
       std::vector<std::string>(absl::StrSplit(path, '/'))) {
    int index = 0;
    if (value.has_list_value() && absl::SimpleAtoi(step, &index) &&
        index >= 0 && index < value.list_value().values_size()) {
      value = Value(value.list_value().values(index));
    } else if (value.has_struct_value() &&
               value.struct_value().fields().contains(step)) {
      value = Value(value.struct_value().fields().at(step));
    } else {
      ADD_FAILURE() << "no " << path << " in " << root.DebugString();
      return Value();
    }
  }
  return value;
}

double Number(const Value& root, const std::string& path) {
  return At(root, path).number_value();
}

std::string Text(const Value& root, const std::string& path) {
  return At(root, path).string_value();
}

// A table's line split at its spaces.
std::vector<std::string> Words(const std::string& line) {
  return absl::StrSplit(line, ' ', absl::SkipEmpty());
}

// The failure line distoptctl prints for a call to `address` that ended
// with `code`.
std::string FailurePrefix(const std::string& address, const std::string& code) {
  return absl::StrCat("distoptctl: ", address, ": ", code, ": ");
}

// A worker with parameters layer.weight [2, 3], layer.bias [3] and other
// [4] (float32: 24 + 12 + 16 = 52 bytes), and an SGD optimizer over the
// first two.
class DistoptctlTest : public testing::WorkerTest {
 protected:
  void SetUp() override {
    testing::WorkerTest::SetUp();
    weight_ =
        *client_.CreateParameterFrom(address_, "layer.weight", Ramp({2, 3}));
    bias_ = *client_.CreateParameterFrom(address_, "layer.bias", Ramp({3}));
    other_ = *client_.CreateParameterFrom(address_, "other", Ramp({4}));
    absl::StatusOr<v1::OptimizerInfo> sgd = client_.CreateOptimizer(
        address_, "sgd",
        {{"lr", hyper::Number(0.5)}, {"momentum", hyper::Number(0.9)}},
        {weight_.id, bias_.id});
    ASSERT_TRUE(sgd.ok()) << sgd.status();
    sgd_id_ = sgd->id();
  }

  // One step of the optimizer with gradients of ones.
  absl::Status Step() {
    const uint64_t context_id = client_.NewContextId();
    absl::Status pushed = client_.AccumulateGradients(
        address_, context_id,
        {{weight_.id, Ramp({2, 3}, 1, 0)}, {bias_.id, Ramp({3}, 1, 0)}});
    if (!pushed.ok()) return pushed;
    absl::Status stepped = client_.Step(address_, sgd_id_, context_id).status();
    client_.ReleaseContext(address_, context_id).IgnoreError();
    client_.ForgetContext(context_id);
    return stepped;
  }

  RemoteParameter weight_, bias_, other_;
  uint64_t sgd_id_ = 0;
};

TEST_F(DistoptctlTest, StatusShowsTheWorker) {
  const Outcome json = Distoptctl({"status", address_, "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(json.err, "");
  const Value status = ParseJson(json.out);
  ASSERT_EQ(At(status, "workers").list_value().values_size(), 1);
  EXPECT_EQ(Text(status, "workers/0/address"), address_);
  EXPECT_EQ(Text(status, "workers/0/health"), "SERVING");
  EXPECT_EQ(Text(status, "workers/0/device"), "cpu");
  EXPECT_EQ(Number(status, "workers/0/pid"), worker_->pid());
  EXPECT_EQ(Number(status, "workers/0/parameters"), 3);
  EXPECT_EQ(Number(status, "workers/0/parameter_bytes"), 52);
  EXPECT_EQ(Number(status, "workers/0/optimizers"), 1);
  EXPECT_EQ(Number(status, "workers/0/autograd_contexts"), 0);
  EXPECT_GT(Number(status, "workers/0/uptime_seconds"), 0);
  EXPECT_GT(Number(status, "workers/0/resident_memory_bytes"), 1 << 20);
  EXPECT_EQ(Number(status, "workers/0/group/rank"), 0);
  EXPECT_EQ(Number(status, "workers/0/group/world_size"), 1);
  EXPECT_EQ(Text(status, "workers/0/group/state"), "single");
  EXPECT_FALSE(Text(status, "workers/0/version").empty());

  const Outcome table = Distoptctl({"status", address_});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, StartsWith("address  "));
  EXPECT_THAT(table.out, HasSubstr("\nhealth         SERVING\n"));
  EXPECT_THAT(table.out, HasSubstr("\nparameters     3 (52 B)\n"));
  EXPECT_THAT(table.out, HasSubstr("\ngroup          rank 0 of 1, single"));
}

// Every address is reported: a dead one is a column and a line on stderr,
// and does not hide the others.
TEST_F(DistoptctlTest, StatusOfSeveralWorkersReportsEachOne) {
  std::unique_ptr<LocalWorker> second = testing::StartWorkerOrDie();
  ASSERT_NE(second, nullptr);
  const std::string dead = testing::ReusableAddress();
  ASSERT_FALSE(dead.empty());
  const Outcome run =
      Distoptctl({"status", address_, dead, second->address(), "--json"});
  EXPECT_EQ(run.exit_code, 1);
  const Value status = ParseJson(run.out);
  ASSERT_EQ(At(status, "workers").list_value().values_size(), 3);
  EXPECT_EQ(Text(status, "workers/0/address"), address_);
  EXPECT_EQ(Number(status, "workers/0/parameters"), 3);
  EXPECT_EQ(Text(status, "workers/1/address"), dead);
  EXPECT_EQ(Text(status, "workers/1/error/code"), "UNAVAILABLE");
  EXPECT_EQ(Text(status, "workers/2/address"), second->address());
  EXPECT_EQ(Text(status, "workers/2/health"), "SERVING");
  EXPECT_EQ(Number(status, "workers/2/parameters"), 0);
  EXPECT_EQ(Number(status, "workers/2/pid"), second->pid());
  ASSERT_THAT(run.ErrorLines(), SizeIs(1));
  EXPECT_THAT(run.ErrorLines()[0],
              StartsWith(FailurePrefix(dead, "UNAVAILABLE")));

  const Outcome table = Distoptctl({"status", address_, dead});
  EXPECT_EQ(table.exit_code, 1);
  // A column per address; the dead one's health is its error code.
  const std::vector<std::string> lines =
      absl::StrSplit(table.out, '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 2u) << table.out;
  EXPECT_THAT(Words(lines[0]), ElementsAre("address", address_, dead));
  EXPECT_THAT(Words(lines[1]), ElementsAre("health", "SERVING", "UNAVAILABLE"));
}

TEST_F(DistoptctlTest, ParametersFilteredByPrefix) {
  const Outcome json =
      Distoptctl({"parameters", address_, "--prefix=layer.", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Value listing = ParseJson(json.out);
  EXPECT_EQ(Text(listing, "address"), address_);
  ASSERT_EQ(At(listing, "parameters").list_value().values_size(), 2);
  EXPECT_EQ(Text(listing, "parameters/0/name"), "layer.weight");
  EXPECT_EQ(Number(listing, "parameters/0/id"), weight_.id);
  EXPECT_EQ(Text(listing, "parameters/0/dtype"), "float32");
  EXPECT_EQ(Number(listing, "parameters/0/shape/0"), 2);
  EXPECT_EQ(Number(listing, "parameters/0/shape/1"), 3);
  EXPECT_EQ(Number(listing, "parameters/0/byte_size"), 24);
  EXPECT_EQ(Text(listing, "parameters/1/name"), "layer.bias");

  const Outcome all = Distoptctl({"parameters", address_});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  const std::vector<std::string> lines =
      absl::StrSplit(all.out, '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(4)) << all.out;
  EXPECT_THAT(lines[0], StartsWith("ID  NAME"));
  EXPECT_THAT(lines[1], AllOf(HasSubstr("layer.weight"), HasSubstr("[2, 3]"),
                              HasSubstr("24 B")));
  EXPECT_THAT(lines[3], HasSubstr("other"));
  const Outcome none = Distoptctl({"parameters", address_, "--prefix=nothing"});
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(none.out, "ID  NAME  DTYPE  SHAPE  BYTES  DEVICE  VERSION\n");
}

TEST_F(DistoptctlTest, OptimizersWithTheirStepsAndHyperparameters) {
  ASSERT_TRUE(Step().ok());
  ASSERT_TRUE(Step().ok());
  const Outcome json = Distoptctl({"optimizers", address_, "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Value listing = ParseJson(json.out);
  ASSERT_EQ(At(listing, "optimizers").list_value().values_size(), 1);
  EXPECT_EQ(Number(listing, "optimizers/0/id"), sgd_id_);
  EXPECT_EQ(Text(listing, "optimizers/0/kind"), "sgd");
  EXPECT_EQ(Number(listing, "optimizers/0/steps"), 2);
  EXPECT_EQ(Number(listing, "optimizers/0/parameter_ids/0"), weight_.id);
  EXPECT_EQ(Number(listing, "optimizers/0/parameter_ids/1"), bias_.id);
  EXPECT_EQ(Number(listing, "optimizers/0/hyperparameters/lr"), 0.5);
  EXPECT_EQ(Number(listing, "optimizers/0/hyperparameters/momentum"), 0.9);
  EXPECT_FALSE(
      At(listing, "optimizers/0/hyperparameters/nesterov").bool_value());

  const Outcome table = Distoptctl({"optimizers", address_});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr(absl::StrCat(weight_.id, ",", bias_.id)));
  EXPECT_THAT(table.out, AllOf(HasSubstr(" sgd "), HasSubstr("lr=0.5"),
                               HasSubstr("momentum=0.9")));
}

TEST_F(DistoptctlTest, ContextsAliveOnTheWorker) {
  const uint64_t context_id = client_.NewContextId();
  ASSERT_TRUE(
      client_
          .AccumulateGradients(address_, context_id, {{other_.id, Ramp({4})}})
          .ok());
  const Outcome json = Distoptctl({"contexts", address_, "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Value listing = ParseJson(json.out);
  ASSERT_EQ(At(listing, "contexts").list_value().values_size(), 1);
  // All 64 bits, as a string.
  EXPECT_EQ(Text(listing, "contexts/0/context_id"), absl::StrCat(context_id));
  EXPECT_EQ(Number(listing, "contexts/0/parameter_ids/0"), other_.id);
  EXPECT_EQ(Number(listing, "contexts/0/gradient_bytes"), 16);

  const Outcome table = Distoptctl({"contexts", address_});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr(absl::StrCat("\n", context_id, "  ")));
  EXPECT_THAT(table.out, HasSubstr("16 B"));

  ASSERT_TRUE(*client_.ReleaseContext(address_, context_id));
  const Outcome after = Distoptctl({"contexts", address_, "--json"});
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(At(ParseJson(after.out), "contexts").list_value().values_size(), 0);
}

// top's rates come from the daemon's counters while a trainer steps.
TEST_F(DistoptctlTest, TopShowsStepRatesAndLatenciesWhileATrainerSteps) {
  std::atomic<bool> stop{false};
  std::atomic<int> steps{0};
  std::thread trainer([&] {
    while (!stop.load()) {
      if (!Step().ok()) break;
      steps.fetch_add(1);
    }
  });
  ASSERT_TRUE(testing::PollUntil([&] { return steps.load() > 0; }));
  const Outcome json = Distoptctl(
      {"top", address_, "--iterations=2", "--interval=200ms", "--json"});
  const Outcome table =
      Distoptctl({"top", address_, "--iterations=1", "--interval=200ms"});
  stop.store(true);
  trainer.join();
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const std::vector<std::string> lines =
      absl::StrSplit(json.out, '\n', absl::SkipEmpty());
  ASSERT_THAT(lines, SizeIs(2)) << json.out;
  for (const std::string& line : lines) {
    const Value refresh = ParseJson(line);
    EXPECT_EQ(Text(refresh, "workers/0/address"), address_);
    // 200 ms apart, by the daemon's clock (more on a busy machine).
    EXPECT_GE(Number(refresh, "workers/0/interval_seconds"), 0.1);
    EXPECT_LT(Number(refresh, "workers/0/interval_seconds"), 5);
    EXPECT_GT(Number(refresh, "workers/0/steps_per_second"), 0);
    const double p50 = Number(refresh, "workers/0/step_seconds_p50");
    EXPECT_GT(p50, 0);
    EXPECT_LT(p50, 1);
    EXPECT_GE(Number(refresh, "workers/0/step_seconds_p99"), p50);
    // The gradients' pushes and releases (steps travel on one stream, which
    // counts when it ends).
    EXPECT_GT(Number(refresh, "workers/0/rpcs_per_second"), 0);
    EXPECT_GT(Number(refresh, "workers/0/received_bytes_per_second"), 0);
    EXPECT_EQ(Number(refresh, "workers/0/refused_rpcs_per_second"), 0);
  }
  ASSERT_EQ(table.exit_code, 0) << table.err;
  const std::vector<std::string> rows =
      absl::StrSplit(table.out, '\n', absl::SkipEmpty());
  ASSERT_THAT(rows, SizeIs(3)) << table.out;
  EXPECT_THAT(rows[0], StartsWith("distoptctl top, every 200ms"));
  EXPECT_THAT(rows[1], StartsWith("ADDRESS          STEPS/S  STEP_P50"));
  EXPECT_THAT(rows[2], StartsWith(address_ + "  "));
  // Its output is not a terminal: no screen clearing.
  EXPECT_EQ(table.out.find('\x1b'), std::string::npos);
}

TEST_F(DistoptctlTest, EveryCommandNamesADeadAddress) {
  const std::string dead = testing::ReusableAddress();
  ASSERT_FALSE(dead.empty());
  const std::vector<std::vector<std::string>> commands = {
      {"status", dead},
      {"parameters", dead},
      {"optimizers", dead},
      {"contexts", dead},
      {"group", dead},
      {"checkpoint", dead},
      {"checkpoint", dead, "--save"},
      {"top", dead, "--iterations=1", "--interval=10ms"},
  };
  for (const std::vector<std::string>& command : commands) {
    SCOPED_TRACE(absl::StrJoin(command, " "));
    const Outcome run = Distoptctl(command);
    EXPECT_EQ(run.exit_code, 1);
    ASSERT_THAT(run.ErrorLines(), SizeIs(1)) << run.err;
    EXPECT_THAT(run.ErrorLines()[0],
                StartsWith(FailurePrefix(dead, "UNAVAILABLE")));
  }
  // The same line, whatever the output format.
  const Outcome json = Distoptctl({"optimizers", dead, "--json"});
  EXPECT_EQ(json.exit_code, 1);
  EXPECT_EQ(json.out, "");
  EXPECT_THAT(json.err, StartsWith(FailurePrefix(dead, "UNAVAILABLE")));
}

TEST(DistoptctlCheckpointTest, SavesNowThenLists) {
  const std::string dir =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/distoptctl_checkpoints");
  std::unique_ptr<LocalWorker> worker =
      testing::StartWorkerOrDie({"--checkpoint_dir=" + dir});
  ASSERT_NE(worker, nullptr);
  {
    Client client;
    ASSERT_TRUE(
        client.CreateParameterFrom(worker->address(), "w", Ramp({8})).ok());
  }
  const Outcome saved =
      Distoptctl({"checkpoint", worker->address(), "--save", "--json"});
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  const Value report = ParseJson(saved.out);
  EXPECT_EQ(Text(report, "saved/folder"), "parameters");
  EXPECT_EQ(Number(report, "saved/parameters"), 1);
  EXPECT_EQ(Text(report, "saved/reason"), "on demand");
  EXPECT_TRUE(At(report, "saved/whole").bool_value());
  EXPECT_GE(Number(report, "saved/bytes"), 32);
  ASSERT_GE(At(report, "checkpoints").list_value().values_size(), 1);
  EXPECT_EQ(Text(report, "checkpoints/0/folder"), "parameters");
  // The one just saved: Save's reply and the listing name the same time.
  EXPECT_EQ(Number(report, "checkpoints/0/saved_at_unix_micros"),
            Number(report, "saved/saved_at_unix_micros"));

  const Outcome listed = Distoptctl({"checkpoint", worker->address()});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const std::vector<std::string> lines =
      absl::StrSplit(listed.out, '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 2u) << listed.out;
  EXPECT_THAT(lines[0], StartsWith("FOLDER"));
  EXPECT_THAT(lines[1], AllOf(StartsWith("parameters  "),
                              HasSubstr("on demand"), HasSubstr(" yes")));

  // A worker without --checkpoint_dir refuses, and the line says so.
  std::unique_ptr<LocalWorker> plain = testing::StartWorkerOrDie();
  ASSERT_NE(plain, nullptr);
  const Outcome refused =
      Distoptctl({"checkpoint", plain->address(), "--save"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(
      refused.err,
      AllOf(StartsWith(FailurePrefix(plain->address(), "FAILED_PRECONDITION")),
            HasSubstr("--checkpoint_dir")));
}

// A group of two ranks; once one is killed and a collective has failed on
// the other, `group` there names the lost rank.
TEST(DistoptctlGroupTest, ShowsRanksAndWhoIsLost) {
  std::unique_ptr<LocalWorker> rank0 = testing::StartRankOrDie(
      {"--rank=0", "--world_size=2", "--rendezvous=127.0.0.1:1",
       "--group_timeout=60s"});
  ASSERT_NE(rank0, nullptr);
  std::unique_ptr<LocalWorker> rank1 = testing::StartRankOrDie(
      {"--rank=1", "--world_size=2", "--rendezvous=" + rank0->address()});
  ASSERT_NE(rank1, nullptr);
  Client client;
  ASSERT_TRUE(testing::PollUntil(
      [&] {
        for (const auto* rank : {rank0.get(), rank1.get()}) {
          absl::StatusOr<v1::GroupInfo> group =
              client.GetGroup(rank->address());
          if (!group.ok() || group->state() != v1::GroupInfo::READY) {
            return false;
          }
        }
        return true;
      },
      absl::Seconds(60)));

  const Outcome ready = Distoptctl({"group", rank1->address(), "--json"});
  ASSERT_EQ(ready.exit_code, 0) << ready.err;
  const Value group = ParseJson(ready.out);
  EXPECT_EQ(Number(group, "rank"), 1);
  EXPECT_EQ(Number(group, "world_size"), 2);
  EXPECT_EQ(Text(group, "state"), "ready");
  EXPECT_EQ(Text(group, "rendezvous"), rank0->address());
  EXPECT_EQ(At(group, "lost_ranks").list_value().values_size(), 0);
  const Outcome both =
      Distoptctl({"status", rank0->address(), rank1->address(), "--json"});
  ASSERT_EQ(both.exit_code, 0) << both.err;
  const Value status = ParseJson(both.out);
  for (int r = 0; r < 2; ++r) {
    const std::string worker = absl::StrCat("workers/", r, "/group/");
    EXPECT_EQ(Number(status, worker + "rank"), r);
    EXPECT_EQ(Number(status, worker + "world_size"), 2);
    EXPECT_EQ(Text(status, worker + "state"), "ready");
  }

  rank1->Signal(SIGKILL);
  ASSERT_TRUE(rank1->Wait(absl::Seconds(10)).ok());
  EXPECT_FALSE(testing::Barrier(client, rank0->address(), 5000).ok());
  const Outcome lost = Distoptctl({"group", rank0->address(), "--json"});
  ASSERT_EQ(lost.exit_code, 0) << lost.err;
  const Value after = ParseJson(lost.out);
  EXPECT_EQ(Number(after, "rank"), 0);
  ASSERT_EQ(At(after, "lost_ranks").list_value().values_size(), 1);
  EXPECT_EQ(Number(after, "lost_ranks/0"), 1);
  EXPECT_NE(Text(after, "state"), "ready");
  const Outcome table = Distoptctl({"group", rank0->address()});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("\nlost ranks  1\n"));
  const Outcome counted = Distoptctl({"status", rank0->address(), "--json"});
  EXPECT_EQ(Number(ParseJson(counted.out), "workers/0/group/lost_ranks"), 1);
}

// TLS and the bearer token, as the client library takes them.
TEST(DistoptctlTokenTest, AWrongTokenIsUnauthenticatedAndNamesTheWorker) {
  const std::string dir = testing::MakeTestCertificates("distoptctl_tls");
  ASSERT_FALSE(dir.empty()) << "openssl could not make the certificates";
  std::vector<std::string> flags = testing::TlsWorkerFlags(dir);
  flags.push_back("--auth_token_file=" + dir + "/token");
  std::unique_ptr<LocalWorker> worker = testing::StartWorkerOrDie(flags);
  ASSERT_NE(worker, nullptr);
  const std::string ca = "--tls_ca_file=" + dir + "/ca.pem";
  const std::string wrong_token = dir + "/wrong_token";
  {
    std::ofstream out(wrong_token);
    out << "not-the-token\n";
  }

  const Outcome right = Distoptctl(
      {"status", worker->address(), ca, "--token_file=" + dir + "/token"});
  EXPECT_EQ(right.exit_code, 0) << right.err;
  EXPECT_THAT(right.out, HasSubstr("\nhealth         SERVING\n"));

  for (const char* command : {"status", "parameters"}) {
    SCOPED_TRACE(command);
    const Outcome wrong = Distoptctl(
        {command, worker->address(), ca, "--token_file=" + wrong_token});
    EXPECT_EQ(wrong.exit_code, 1);
    ASSERT_THAT(wrong.ErrorLines(), SizeIs(1)) << wrong.err;
    EXPECT_THAT(
        wrong.ErrorLines()[0],
        StartsWith(FailurePrefix(worker->address(), "UNAUTHENTICATED")));
  }
  // Without the token at all.
  const Outcome none = Distoptctl({"parameters", worker->address(), ca});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.err,
              StartsWith(FailurePrefix(worker->address(), "UNAUTHENTICATED")));
}

TEST(DistoptctlUsageTest, UsageErrorsExitWithTwo) {
  const std::vector<std::vector<std::string>> mistakes = {
      {},
      {"stats", "127.0.0.1:1"},
      {"status"},
      {"parameters", "127.0.0.1:1", "127.0.0.1:2"},
      {"status", "127.0.0.1:1", "--save"},
      {"status", "127.0.0.1:1", "--no_such_flag"},
      {"top", "127.0.0.1:1", "--interval=0s"},
      {"status", "127.0.0.1:1", "--timeout=soon"},
      {"status", "127.0.0.1:1", "--token_file=/dev/null"},
      {"status", "127.0.0.1:1", "--tls_ca_file=/no/such/file"},
  };
  for (const std::vector<std::string>& mistake : mistakes) {
    SCOPED_TRACE(absl::StrJoin(mistake, " "));
    const Outcome run = Distoptctl(mistake);
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_EQ(run.out, "");
    EXPECT_THAT(run.err, StartsWith("distoptctl: "));
  }
  const Outcome help = Distoptctl({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* command :
       {"status ADDRESS...", "parameters ADDRESS", "optimizers ADDRESS",
        "contexts ADDRESS", "group ADDRESS", "checkpoint ADDRESS",
        "top ADDRESS...", "--token_file", "--json"}) {
    EXPECT_THAT(help.out, HasSubstr(command));
  }
}

}  // namespace
}  // namespace distopt
