// The chunked autograd calls against a real daemon with the bad input a
// client could send: no chunks, chunks that do not add up to the announced
// size, bytes that do not parse, and a well-formed request that the call
// itself refuses. Each is INVALID_ARGUMENT naming what is wrong, and the
// context is left as it was.
#include <string>

#include "common/chunked_message.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::testing::HasSubstr;

class ChunkedAutogradTest : public testing::WorkerTest {
 protected:
  // Sends `chunks` on AccumulateGradientsChunked; the call's status.
  grpc::Status Send(const std::vector<v1::MessageChunk>& chunks) {
    auto stub = v1::AutogradService::NewStub(client_.Channel(address_));
    grpc::ClientContext context;
    auto stream = stub->AccumulateGradientsChunked(&context);
    for (const v1::MessageChunk& chunk : chunks) stream->Write(chunk);
    stream->WritesDone();
    v1::MessageChunk reply;
    while (stream->Read(&reply)) {
    }
    return stream->Finish();
  }

  static v1::MessageChunk Chunk(int64_t total, std::string data) {
    v1::MessageChunk chunk;
    chunk.set_total_bytes(total);
    chunk.set_data(std::move(data));
    return chunk;
  }

  // Nothing was accumulated in `context_id` on the daemon.
  void ExpectNoGradients(uint64_t context_id) {
    absl::StatusOr<std::map<uint64_t, Tensor>> gradients =
        client_.GetGradients(address_, context_id);
    // The context was never created, or holds nothing.
    if (gradients.ok()) {
      EXPECT_TRUE(gradients->empty());
    } else {
      EXPECT_EQ(gradients.status().code(), absl::StatusCode::kNotFound)
          << gradients.status();
    }
  }
};

TEST_F(ChunkedAutogradTest, MalformedChunksAreRefusedWithTheReason) {
  grpc::Status status = Send({});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("request: no chunks"));

  status = Send({Chunk(10, "abc")});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("first chunk announced 10"));

  status = Send({Chunk(3, "abc"), Chunk(0, "def")});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("more than the 3 bytes"));

  status = Send({Chunk(-1, "")});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("request.total_bytes: -1"));

  // More than a chunked call carries: refused before anything is buffered.
  status = Send({Chunk(int64_t{2100} << 20, "abc")});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("request.total_bytes: 2202009600; expected 0 to"));

  const std::string garbage(64, '\xff');
  status = Send({Chunk(garbage.size(), garbage)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("do not parse"));
}

TEST_F(ChunkedAutogradTest, ARequestTheCallRefusesChangesNothing) {
  absl::StatusOr<RemoteParameter> w =
      client_.CreateParameter(address_, "w", DType::kFloat32, {4});
  ASSERT_TRUE(w.ok()) << w.status();
  const uint64_t context_id = client_.NewContextId();
  // A good gradient, then one of the wrong shape: all or nothing.
  v1::AccumulateGradientsRequest request;
  request.set_context_id(context_id);
  v1::ParameterGradient* good = request.add_gradients();
  good->set_parameter_id(w->id);
  good->mutable_gradient()->set_dtype(v1::DTYPE_FLOAT32);
  good->mutable_gradient()->add_shape(4);
  good->mutable_gradient()->set_data(std::string(16, '\0'));
  v1::ParameterGradient* bad = request.add_gradients();
  *bad = *good;
  bad->mutable_gradient()->set_shape(0, 2);
  bad->mutable_gradient()->set_data(std::string(8, '\0'));

  struct Collect {
    bool Write(const v1::MessageChunk& chunk) {
      chunks.push_back(chunk);
      return true;
    }
    std::vector<v1::MessageChunk> chunks;
  } collect;
  ASSERT_TRUE(WriteChunked(request, &collect));
  const grpc::Status status = Send(collect.chunks);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("gradients[1].gradient: float32[2]; expected "
                        "float32[4]"));
  ExpectNoGradients(context_id);
}

}  // namespace
}  // namespace distopt
