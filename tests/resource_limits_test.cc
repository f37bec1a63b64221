// A client that opens streams and never uses them must not exhaust the
// daemon (issue 12): threads and memory stay bounded, calls past the bounds
// are refused with RESOURCE_EXHAUSTED, a stalled reader is cut off, and a
// well-behaved client is served meanwhile. Through a real daemon.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/config.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/optimizer.grpc.pb.h"
#include "proto/distopt/v1/parameter.grpc.pb.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

// Under AddressSanitizer (--config=asan) a daemon's memory grows by its
// shadow and quarantine too (measured: 153 MiB where 150 bound it): the
// bound on the growth is twice as loose there; the bound of an unbounded
// design (500 MiB and more) is still far above it.
#if defined(ABSL_HAVE_ADDRESS_SANITIZER)
constexpr int64_t kSanitizerMemoryFactor = 2;
#else
constexpr int64_t kSanitizerMemoryFactor = 1;
#endif

using ::distopt::testing::PollUntil;
using ::testing::HasSubstr;

constexpr absl::Duration kStallTimeout = absl::Seconds(2);

class ResourceLimitsTest : public testing::WorkerTest {
 protected:
  std::vector<std::string> WorkerFlags() const override {
    return {"--max_streams=32", "--max_streams_per_connection=8",
            "--max_threads=64",
            "--stream_stall_timeout=" + absl::FormatDuration(kStallTimeout)};
  }

  // The median latency of a small GetParameter, in microseconds.
  double MedianGetLatency(const RemoteParameter& small) {
    std::vector<double> latencies;
    for (int i = 0; i < 40; ++i) {
      const absl::Time start = absl::Now();
      EXPECT_TRUE(client_.GetParameter(small).ok());
      latencies.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
    }
    std::sort(latencies.begin(), latencies.end());
    return latencies[latencies.size() / 2];
  }

  // A connection of its own whose receive window stays small (no
  // bandwidth-delay probing, 64 KiB of lookahead): a reply the caller does
  // not read stays stalled on the daemon. With gRPC's default the window
  // grew until a 16 MiB parameter's reply arrived whole in the client's
  // buffers, and its stream ended before any stall timeout (seen in CI).
  std::shared_ptr<grpc::Channel> StalledChannel() {
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    arguments.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    arguments.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024);
    arguments.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1);
    return grpc::CreateCustomChannel(
        address_, grpc::InsecureChannelCredentials(), arguments);
  }

  // A new ReadParameter stream of `small` on `client`'s connection, read to
  // its end: its status.
  grpc::Status RawRead(Client& client, const RemoteParameter& small) {
    auto parameters = v1::ParameterService::NewStub(client.Channel(address_));
    return RawRead(parameters.get(), small);
  }
  grpc::Status RawRead(v1::ParameterService::Stub* parameters,
                       const RemoteParameter& small) {
    grpc::ClientContext context;
    v1::ReadParameterRequest request;
    request.mutable_parameter()->set_id(small.id);
    auto reader = parameters->ReadParameter(&context, request);
    v1::ParameterChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  }
};

// Hostile clients over ten connections open 40 ReadParameter streams of a
// 16 MiB parameter and read nothing, and 160 StepStreams that send nothing.
TEST_F(ResourceLimitsTest, IdleAndStalledStreamsAreBounded) {
  absl::StatusOr<RemoteParameter> big = client_.CreateParameter(
      address_, "big", DType::kFloat32, {4 << 20}, init::Constant(1));
  ASSERT_TRUE(big.ok()) << big.status();
  absl::StatusOr<RemoteParameter> small =
      client_.CreateParameter(address_, "small", DType::kFloat32, {4});
  ASSERT_TRUE(small.ok());
  const double usual = MedianGetLatency(*small);
  const int64_t threads_before = worker_->ProcStatus("Threads");
  const int64_t rss_before = worker_->ProcStatus("VmRSS");

  struct Hostile {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReader<v1::ParameterChunk>> reader;
    std::unique_ptr<grpc::ClientReaderWriter<v1::StepRequest, v1::StepOutcome>>
        stepper;
  };
  std::vector<std::unique_ptr<Client>> connections;
  std::vector<Hostile> streams;
  Client probe;
  // Two connections of readers first, so that which calls hold the slots
  // is not a race: each holds its 8 (--max_streams_per_connection) and
  // the rest are refused. A ninth read on the connection is refused once
  // its readers have arrived.
  std::vector<std::shared_ptr<grpc::Channel>> stalled;
  for (int c = 0; c < 2; ++c) {
    stalled.push_back(StalledChannel());
    auto parameters = v1::ParameterService::NewStub(stalled.back());
    for (int i = 0; i < 20; ++i) {
      Hostile read;
      read.context = std::make_unique<grpc::ClientContext>();
      v1::ReadParameterRequest request;
      request.mutable_parameter()->set_id(big->id);
      read.reader = parameters->ReadParameter(read.context.get(), request);
      streams.push_back(std::move(read));
    }
    ASSERT_TRUE(PollUntil([&] {
      return RawRead(parameters.get(), *small).error_code() ==
             grpc::StatusCode::RESOURCE_EXHAUSTED;
    })) << "connection "
        << c << "'s readers never held its slots";
  }
  // Then eight connections of idle step streams, which take the other 16
  // slots (--max_streams) and are refused past them.
  for (int c = 0; c < 8; ++c) {
    connections.push_back(std::make_unique<Client>());
    auto optimizers =
        v1::OptimizerService::NewStub(connections.back()->Channel(address_));
    for (int i = 0; i < 20; ++i) {
      Hostile idle;
      idle.context = std::make_unique<grpc::ClientContext>();
      idle.stepper = optimizers->StepStream(idle.context.get());
      streams.push_back(std::move(idle));
    }
  }
  // The calls have arrived: their streams hold every slot, so that a probe
  // on a connection of its own is refused.
  ASSERT_TRUE(PollUntil([&] {
    return RawRead(probe, *small).error_code() ==
           grpc::StatusCode::RESOURCE_EXHAUSTED;
  })) << "the hostile streams never held every slot";
  // Bounded: threads under the quota, memory far from 200 streams' worth.
  const int64_t threads = worker_->ProcStatus("Threads");
  const int64_t rss = worker_->ProcStatus("VmRSS");
  EXPECT_LE(threads, threads_before + 64);
  EXPECT_LT(rss - rss_before, kSanitizerMemoryFactor * 150 * 1024);
  // Meanwhile a well-behaved client is served as usual.
  const double during = MedianGetLatency(*small);
  std::printf(
      "threads %lld -> %lld, RSS %lld -> %lld kB, GetParameter p50 %.0f -> "
      "%.0f us\n",
      static_cast<long long>(threads_before), static_cast<long long>(threads),
      static_cast<long long>(rss_before), static_cast<long long>(rss), usual,
      during);
  EXPECT_LT(during, std::max(20 * usual, 20000.0))
      << "usual " << usual << " us";
  // And a new stream past the bounds is refused, naming the bound.
  {
    grpc::Status status = RawRead(probe, *small);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(status.error_message(), HasSubstr("(--max_streams)"));
  }
  // The stalled readers are cut off after --stream_stall_timeout (the idle
  // step streams stay): their calls end cancelled, and a reader on a fresh
  // connection is served again. A fixed wait, not a poll: a client sees a
  // reader cut off only by reading it, which would end its stall, and a
  // slot that frees proves nothing (slots were seen to free well before
  // any stall timeout).
  absl::SleepFor(2 * kStallTimeout);
  int cut_off = 0;
  for (Hostile& stream : streams) {
    if (stream.reader == nullptr) continue;
    v1::ParameterChunk chunk;
    while (stream.reader->Read(&chunk)) {
    }
    const grpc::Status status = stream.reader->Finish();
    if (status.error_code() == grpc::StatusCode::CANCELLED) ++cut_off;
  }
  EXPECT_GT(cut_off, 0);
  Client fresh;
  absl::StatusOr<Tensor> values = fresh.ReadParameter(*small);
  EXPECT_TRUE(values.ok()) << values.status();
  for (Hostile& stream : streams) {
    if (stream.stepper != nullptr) stream.context->TryCancel();
  }
}

}  // namespace
}  // namespace distopt
