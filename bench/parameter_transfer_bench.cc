// Write then read of a 256 MiB fp32 parameter through the client library,
// against a plain TCP socket moving the same bytes over loopback in the same
// run. Prints both throughputs and their ratio (goal: at least 0.5).
//
//   bazel run -c opt //bench:parameter_transfer_bench
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "client/client.h"
#include "client/local_worker.h"

namespace distopt {
namespace {

constexpr size_t kBytes = size_t{256} << 20;
constexpr size_t kSocketChunk = size_t{1} << 20;

bool SendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t sent = send(fd, data, std::min(size, kSocketChunk), 0);
    if (sent <= 0) return false;
    data += sent;
    size -= static_cast<size_t>(sent);
  }
  return true;
}

bool ReceiveAll(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t got = recv(fd, data, std::min(size, kSocketChunk), 0);
    if (got <= 0) return false;
    data += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

// The peer: plain TCP over loopback. The client sends kBytes, the server
// takes them all and sends them back: the same bytes, the same directions
// as a parameter write followed by a read.
void BM_RawTcpLoopback(benchmark::State& state) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  listen(listener, 1);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);

  std::thread server([listener] {
    const int fd = accept(listener, nullptr, nullptr);
    std::vector<char> buffer(kBytes);
    while (ReceiveAll(fd, buffer.data(), kBytes) &&
           SendAll(fd, buffer.data(), kBytes)) {
    }
    close(fd);
  });
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<char> out(kBytes, 1);
  std::vector<char> in(kBytes);
  for (auto _ : state) {
    if (!SendAll(fd, out.data(), kBytes) ||
        !ReceiveAll(fd, in.data(), kBytes)) {
      state.SkipWithError("socket transfer failed");
      break;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 *
                          kBytes);
  close(fd);
  server.join();
  close(listener);
}
BENCHMARK(BM_RawTcpLoopback)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(3.0);

void BM_ParameterWriteRead(benchmark::State& state) {
  absl::StatusOr<std::unique_ptr<LocalWorker>> worker = LocalWorker::Start({});
  if (!worker.ok()) {
    state.SkipWithError(std::string(worker.status().message()).c_str());
    return;
  }
  {
    Client client;
    Tensor values = *Tensor::AllocateHost(DType::kFloat32,
                                          {static_cast<int64_t>(kBytes / 4)});
    std::memset(values.data(), 1, values.byte_size());
    absl::StatusOr<RemoteParameter> parameter = client.CreateParameter(
        (*worker)->address(), "bench", DType::kFloat32, values.shape());
    if (!parameter.ok()) {
      state.SkipWithError(std::string(parameter.status().message()).c_str());
      return;
    }
    // Reads land in one reused buffer, as the TCP peer's do.
    Tensor read = *Tensor::AllocateHost(DType::kFloat32, values.shape());
    for (auto _ : state) {
      absl::StatusOr<ParameterInfo> written =
          client.WriteParameter(*parameter, values);
      absl::Status status = client.ReadParameterInto(*parameter, read);
      if (!written.ok() || !status.ok()) {
        state.SkipWithError("parameter transfer failed");
        break;
      }
      benchmark::DoNotOptimize(read.data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 *
                            kBytes);
  }
  (*worker)->Stop().IgnoreError();
}
BENCHMARK(BM_ParameterWriteRead)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(3.0);

// Keeps each benchmark's throughput for the ratio printed at the end.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      auto it = run.counters.find("bytes_per_second");
      if (it != run.counters.end() && !run.error_occurred) {
        throughput[run.benchmark_name()] = it->second.value;
      }
    }
  }
  std::map<std::string, double> throughput;
};

}  // namespace
}  // namespace distopt

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  distopt::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const auto& t = reporter.throughput;
  auto tcp = t.find("BM_RawTcpLoopback/min_time:3.000/real_time");
  auto grpc = t.find("BM_ParameterWriteRead/min_time:3.000/real_time");
  if (tcp == t.end() || grpc == t.end()) {
    std::printf("ratio: not available (a benchmark did not run)\n");
    return 1;
  }
  std::printf(
      "\nraw TCP loopback:        %8.1f MiB/s\n"
      "parameter write + read:  %8.1f MiB/s\n"
      "ratio (distopt / TCP):   %8.3f   (goal: >= 0.5)\n",
      tcp->second / (1 << 20), grpc->second / (1 << 20),
      grpc->second / tcp->second);
  return 0;
}
