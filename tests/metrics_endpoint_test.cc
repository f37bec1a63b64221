// The daemon's /metrics endpoint as clients on the network meet it: a
// scraper is answered while others hold connections open and send nothing
// (or a byte at a time), more of them than the endpoint keeps, or while the
// daemon is out of descriptors; what is not a GET of /metrics is refused
// with the HTTP status that says why.
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/base/config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/http_get.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/status.pb.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

// Opens a connection to 127.0.0.1:`port` and sends `bytes`; -1 on failure.
int ConnectAndSend(int port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
          0 ||
      send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(bytes.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

// The first line of the reply on `fd` ("HTTP/1.1 404 Not Found").
std::string StatusLine(int fd) {
  std::string reply;
  char buffer[1024];
  ssize_t n = 0;
  while (reply.find("\r\n") == std::string::npos &&
         (n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    reply.append(buffer, static_cast<size_t>(n));
  }
  return reply.substr(0, reply.find("\r\n"));
}

// The CPU seconds (user and system) process `pid` has used; -1 if unknown.
double CpuSeconds(pid_t pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/stat"));
  const std::string stat((std::istreambuf_iterator<char>(file)),
                         std::istreambuf_iterator<char>());
  // The fields after the command's closing parenthesis, from the state
  // (field 3): utime and stime are fields 14 and 15.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int number = 3; number <= 15 && fields >> field; ++number) {
    if (number >= 14) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

class MetricsEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    worker_ = testing::StartWorkerOrDie({"--metrics_listen=127.0.0.1:0"});
    ASSERT_NE(worker_, nullptr);
    v1::GetStatusRequest request;
    request.set_without_metrics(true);
    absl::StatusOr<v1::WorkerStatus> status =
        client_.GetStatus(worker_->address(), request);
    ASSERT_TRUE(status.ok()) << status.status();
    metrics_ = status->metrics_address();
    ASSERT_TRUE(
        absl::SimpleAtoi(metrics_.substr(metrics_.rfind(':') + 1), &port_))
        << metrics_;
  }

  // A scrape, as Prometheus makes one: the time it took, or a failure.
  absl::StatusOr<absl::Duration> Scrape() {
    const absl::Time start = absl::Now();
    absl::StatusOr<testing::HttpReply> reply =
        testing::HttpGet(metrics_, "/metrics", absl::Seconds(10));
    if (!reply.ok()) return reply.status();
    if (reply->status != 200 ||
        !absl::StrContains(reply->body, "distopt_rpcs_total")) {
      return absl::InternalError(absl::StrCat("status ", reply->status));
    }
    return absl::Now() - start;
  }

  Client client_;
  std::unique_ptr<LocalWorker> worker_;
  std::string metrics_;
  int port_ = 0;
};

// Connections that send part of a request and stall (slowloris), more than
// the endpoint keeps open: a scrape made meanwhile is answered at once, not
// after their request timeouts, one after the other.
TEST_F(MetricsEndpointTest, StalledClientsDoNotKeepScrapersOut) {
  std::vector<int> stalled;
  for (int i = 0; i < 100; ++i) {
    const int fd = ConnectAndSend(port_, "GET /metr");
    ASSERT_GE(fd, 0) << "connection " << i;
    stalled.push_back(fd);
  }
  for (int scrape = 0; scrape < 3; ++scrape) {
    absl::StatusOr<absl::Duration> took = Scrape();
    ASSERT_TRUE(took.ok()) << took.status();
    EXPECT_LT(*took, absl::Seconds(2)) << "scrape " << scrape;
  }
  for (int fd : stalled) close(fd);
  // And afterwards.
  EXPECT_TRUE(Scrape().ok());
}

// Out of descriptors (its limit lowered under what it holds), the endpoint
// rests its listener a moment at a time instead of polling the connections
// it cannot accept over and over, and serves scrapes again once
// descriptors are free.
TEST_F(MetricsEndpointTest, OutOfDescriptorsItRestsAndThenServesAgain) {
#if defined(ABSL_HAVE_ADDRESS_SANITIZER)
  // Built with the sanitizers (--config=asan, which adds UBSan), the daemon
  // dies out of descriptors inside gRPC's own server code (UBSan: "member
  // call on address ... which does not point to an object of type
  // 'CompletionQueueTag'", grpcpp/completion_queue.h), not in this
  // endpoint's: reported, not fixed here.
  GTEST_SKIP() << "gRPC's server fails UBSan out of descriptors";
#endif
  const pid_t pid = worker_->pid();
  size_t open = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(
           absl::StrCat("/proc/", pid, "/fd"))) {
    ++open;
  }
  rlimit old_limit;
  ASSERT_EQ(prlimit(pid, RLIMIT_NOFILE, nullptr, &old_limit), 0);
  rlimit low = old_limit;
  low.rlim_cur = open + 8;
  ASSERT_EQ(prlimit(pid, RLIMIT_NOFILE, &low, nullptr), 0);
  // Eight it accepts; the rest wait in its listen queue (16 deep), which
  // keeps the listener readable.
  std::vector<int> held;
  for (int i = 0; i < 14; ++i) {
    const int fd = ConnectAndSend(port_, "GET /metr");
    ASSERT_GE(fd, 0) << "connection " << i;
    held.push_back(fd);
  }
  absl::SleepFor(absl::Milliseconds(300));
  const double before = CpuSeconds(pid);
  absl::SleepFor(absl::Seconds(2));
  const double used = CpuSeconds(pid) - before;
  // Polling a listener it cannot accept from would keep a core busy.
  EXPECT_LT(used, 0.5) << "CPU seconds in 2 s out of descriptors";
  // Once these are gone and descriptors are to be had again (rendering
  // the metrics reads /proc, which takes descriptors of its own).
  for (int fd : held) close(fd);
  ASSERT_EQ(prlimit(pid, RLIMIT_NOFILE, &old_limit, nullptr), 0);
  absl::StatusOr<absl::Duration> took = Scrape();
  EXPECT_TRUE(took.ok()) << took.status();
}

TEST_F(MetricsEndpointTest, AnythingButGetOfMetricsIsRefusedWithItsStatus) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"POST /metrics HTTP/1.1\r\n\r\n", "405"},
      {"GET /other HTTP/1.1\r\n\r\n", "404"},
      {"GET /metrics\r\n\r\n", "400"},
      {absl::StrCat("GET /metrics HTTP/1.1\r\nX: ", std::string(20000, 'x')),
       "431"},
      {"GET /metrics?x=1 HTTP/1.0\r\n\r\n", "200"},
  };
  for (const auto& [request, status] : cases) {
    const int fd = ConnectAndSend(port_, request);
    ASSERT_GE(fd, 0);
    EXPECT_TRUE(absl::StrContains(StatusLine(fd), absl::StrCat(" ", status)))
        << request.substr(0, 40);
    close(fd);
  }
}

}  // namespace
}  // namespace distopt
