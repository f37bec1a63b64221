// Two daemons scraped by a real Prometheus (Debian's prometheus, started
// and stopped here on loopback ports): what Prometheus stores is what the
// test did. The step counter equals the steps taken, the median of the
// step latency histogram lies within the bounds of the bucket that holds
// the median observation, and a refused call is counted under its code.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/testing/child_process.h"
#include "common/testing/http_get.h"
#include "proto/distopt/v1/optimizer.grpc.pb.h"
#include "proto/distopt/v1/status.grpc.pb.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::PollUntil;
using ::distopt::testing::Ramp;
using ::distopt::testing::StartWorkerOrDie;

constexpr char kPrometheus[] = "/usr/bin/prometheus";

// The body of GET http://127.0.0.1:port/path; empty when it fails.
std::string HttpGet(int port, const std::string& path) {
  absl::StatusOr<testing::HttpReply> reply =
      testing::HttpGet(absl::StrCat("127.0.0.1:", port), path);
  return reply.ok() ? reply->body : "";
}

class PrometheusServer {
 public:
  // Scrapes `targets` every second.
  static std::unique_ptr<PrometheusServer> Start(
      const std::vector<std::string>& targets) {
    auto server = std::unique_ptr<PrometheusServer>(new PrometheusServer);
    char folder[] = "/tmp/prometheus_test.XXXXXX";
    if (mkdtemp(folder) == nullptr) return nullptr;
    server->folder_ = folder;
    const std::string config = server->folder_ + "/prometheus.yml";
    std::ofstream(config) << "global:\n"
                          << "  scrape_interval: 1s\n"
                          << "  scrape_timeout: 1s\n"
                          << "scrape_configs:\n"
                          << "  - job_name: distopt\n"
                          << "    static_configs:\n"
                          << "      - targets: ['"
                          << absl::StrJoin(targets, "', '") << "']\n";
    server->port_ = testing::FreeLoopbackPorts(1)[0];
    const std::vector<std::string> args = {
        kPrometheus, "--config.file=" + config,
        "--storage.tsdb.path=" + server->folder_ + "/data",
        absl::StrCat("--web.listen-address=127.0.0.1:", server->port_),
        "--log.level=warn"};
    server->pid_ = testing::StartProcess(args);
    return server;
  }

  ~PrometheusServer() {
    testing::StopProcess(pid_);
    if (!folder_.empty()) {
      std::system(("rm -rf '" + folder_ + "'").c_str());
    }
  }

  bool Ready() {
    return HttpGet(port_, "/-/ready").find("Ready") != std::string::npos;
  }

  // The values of an instant query, one per series (in Prometheus's order).
  std::vector<double> Query(const std::string& promql) {
    const std::string body =
        HttpGet(port_, "/api/v1/query?query=" + testing::UrlEncoded(promql));
    last_reply_ = body;
    std::vector<double> values;
    static const std::regex kValue(R"re("value":\[[0-9.e+]+,"([^"]*)"\])re");
    for (std::sregex_iterator it(body.begin(), body.end(), kValue), end;
         it != end; ++it) {
      double value = 0;
      if (absl::SimpleAtod((*it)[1].str(), &value)) values.push_back(value);
    }
    return values;
  }
  const std::string& last_reply() const { return last_reply_; }

 private:
  PrometheusServer() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string folder_;
  std::string last_reply_;
};

std::string MetricsAddress(Client& client, const std::string& address) {
  v1::GetStatusRequest request;
  request.set_without_metrics(true);
  absl::StatusOr<v1::WorkerStatus> status = client.GetStatus(address, request);
  EXPECT_TRUE(status.ok()) << status.status();
  return status.ok() ? status->metrics_address() : "";
}

// Takes `steps` Adam steps on `address` through the client library.
void TakeSteps(Client& client, const std::string& address, int steps) {
  absl::StatusOr<RemoteParameter> weight =
      client.CreateParameterFrom(address, "weight", Ramp({64, 32}, 0.5f));
  ASSERT_TRUE(weight.ok()) << weight.status();
  absl::StatusOr<v1::OptimizerInfo> adam = client.CreateOptimizer(
      address, "adam", {{"lr", hyper::Number(0.01)}}, {weight->id});
  ASSERT_TRUE(adam.ok()) << adam.status();
  for (int step = 0; step < steps; ++step) {
    const uint64_t context_id = client.NewContextId();
    ASSERT_TRUE(client
                    .AccumulateGradients(address, context_id,
                                         {{weight->id, Ramp({64, 32}, step)}})
                    .ok());
    absl::StatusOr<v1::StepResponse> stepped =
        client.Step(address, adam->id(), context_id);
    ASSERT_TRUE(stepped.ok() && stepped->applied()) << stepped.status();
    ASSERT_TRUE(client.ReleaseContext(address, context_id).ok());
    client.ForgetContext(context_id);
  }
}

TEST(PrometheusTest, ScrapedFiguresAreWhatTheDaemonsDid) {
  ASSERT_EQ(access(kPrometheus, X_OK), 0)
      << kPrometheus << " is missing: tools/install_deps.sh installs it";
  std::unique_ptr<LocalWorker> first =
      StartWorkerOrDie({"--metrics_listen=127.0.0.1:0"});
  std::unique_ptr<LocalWorker> second =
      StartWorkerOrDie({"--metrics_listen=127.0.0.1:0"});
  ASSERT_TRUE(first != nullptr && second != nullptr);
  Client client;
  const std::string first_metrics = MetricsAddress(client, first->address());
  const std::string second_metrics = MetricsAddress(client, second->address());
  ASSERT_FALSE(first_metrics.empty());
  ASSERT_FALSE(second_metrics.empty());

  std::unique_ptr<PrometheusServer> prometheus =
      PrometheusServer::Start({first_metrics, second_metrics});
  ASSERT_NE(prometheus, nullptr);
  ASSERT_TRUE(PollUntil([&] { return prometheus->Ready(); }, absl::Seconds(30)))
      << "Prometheus did not become ready";

  constexpr int kFirstSteps = 23;
  constexpr int kSecondSteps = 9;
  ASSERT_NO_FATAL_FAILURE(TakeSteps(client, first->address(), kFirstSteps));
  ASSERT_NO_FATAL_FAILURE(TakeSteps(client, second->address(), kSecondSteps));
  // Refused: an optimizer the first daemon never had.
  constexpr int kRefused = 3;
  for (int i = 0; i < kRefused; ++i) {
    auto stub = v1::OptimizerService::NewStub(client.Channel(first->address()));
    grpc::ClientContext context;
    v1::StepRequest request;
    request.set_optimizer_id(987654);
    request.set_context_id(client.NewContextId());
    v1::StepResponse response;
    EXPECT_EQ(stub->Step(&context, request, &response).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }

  auto value_of = [&](const std::string& promql) {
    const std::vector<double> values = prometheus->Query(promql);
    return values.size() == 1 ? values[0] : -1.0;
  };
  const std::string steps_query = absl::StrCat(
      "sum(distopt_optimizer_steps_total{result=\"applied\",instance=\"",
      first_metrics, "\"})");
  // Scraped every second: the counter reaches the steps taken.
  double steps = -1;
  EXPECT_TRUE(PollUntil(
      [&] {
        steps = value_of(steps_query);
        return steps == kFirstSteps;
      },
      absl::Seconds(30)))
      << steps_query << " = " << steps << ": " << prometheus->last_reply();
  const std::string second_steps_query = absl::StrCat(
      "sum(distopt_optimizer_steps_total{result=\"applied\",kind=\"adam\","
      "optimizer=\"distributed\",instance=\"",
      second_metrics, "\"})");
  EXPECT_TRUE(PollUntil(
      [&] {
        steps = value_of(second_steps_query);
        return steps == kSecondSteps;
      },
      absl::Seconds(30)))
      << second_steps_query << " = " << steps << ": "
      << prometheus->last_reply();
  const std::string refused_query = absl::StrCat(
      "distopt_rpcs_total{service=\"distopt.v1.OptimizerService\",method="
      "\"Step\",code=\"NOT_FOUND\",instance=\"",
      first_metrics, "\"}");
  double refused = -1;
  EXPECT_TRUE(PollUntil(
      [&] {
        refused = value_of(refused_query);
        return refused == kRefused;
      },
      absl::Seconds(30)))
      << refused_query << " = " << refused << ": " << prometheus->last_reply();

  // The median of the first daemon's step latencies, as Prometheus
  // estimates it, within the bucket that holds the median observation.
  const std::string bucket_selector =
      absl::StrCat("distopt_optimizer_step_seconds_bucket{instance=\"",
                   first_metrics, "\"}");
  const double median = value_of(absl::StrCat(
      "histogram_quantile(0.5, sum by (le) (", bucket_selector, "))"));
  // The buckets as Prometheus stores them: (bound, observations at or
  // below it), in order of the bound.
  prometheus->Query(absl::StrCat("sum by (le) (", bucket_selector, ")"));
  const std::string buckets = prometheus->last_reply();
  std::vector<std::pair<double, double>> cumulative;
  static const std::regex kBucket(
      R"re("le":"([^"]+)"\},"value":\[[0-9.e+]+,"([^"]*)"\])re");
  for (std::sregex_iterator it(buckets.begin(), buckets.end(), kBucket), end;
       it != end; ++it) {
    double bound = 0, count = 0;
    const std::string le = (*it)[1].str();
    if (le == "+Inf") {
      bound = std::numeric_limits<double>::infinity();
    } else {
      ASSERT_TRUE(absl::SimpleAtod(le, &bound)) << le;
    }
    ASSERT_TRUE(absl::SimpleAtod((*it)[2].str(), &count));
    cumulative.emplace_back(bound, count);
  }
  std::sort(cumulative.begin(), cumulative.end());
  ASSERT_GE(cumulative.size(), 10u) << buckets;
  EXPECT_EQ(cumulative.back().second, kFirstSteps) << buckets;
  double lower = 0, upper = -1;
  for (const auto& [bound, at_or_below] : cumulative) {
    if (at_or_below >= kFirstSteps / 2.0) {
      upper = bound;
      break;
    }
    lower = bound;
  }
  ASSERT_GT(upper, 0) << "no bucket holds half the steps";
  EXPECT_GE(median, lower);
  EXPECT_LE(median, upper);
  EXPECT_GT(median, 0);
}

}  // namespace
}  // namespace distopt
