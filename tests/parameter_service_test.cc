// ParameterService end to end: a real distopt_worker driven through the
// client library (and, for requests the client would never send, through the
// generated gRPC client).
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/half.h"
#include "common/wire_tensor.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/parameter.grpc.pb.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::Ramp;
using ::distopt::testing::SameBytes;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::SizeIs;

class ParameterServiceTest : public testing::WorkerTest {
 protected:
  grpc::Status RawCreate(const v1::CreateParameterRequest& request) {
    grpc::ClientContext context;
    v1::ParameterInfo response;
    return ParameterServiceClient()->CreateParameter(&context, request,
                                                     &response);
  }

  // The daemon still serves: a fresh parameter round-trips.
  void ExpectStillServing() {
    static int counter = 0;
    const std::string name = "still_serving_" + std::to_string(counter++);
    Tensor values = Ramp({3}, 1.0f);
    absl::StatusOr<RemoteParameter> p =
        client_.CreateParameterFrom(address_, name, values);
    ASSERT_TRUE(p.ok()) << p.status();
    absl::StatusOr<Tensor> read = client_.ReadParameter(*p);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_TRUE(SameBytes(*read, values));
    ASSERT_TRUE(client_.DeleteParameter(*p).ok());
  }
};

v1::WriteParameterRequest Chunk(uint64_t id, int64_t offset, size_t bytes,
                                char fill = 'x') {
  v1::WriteParameterRequest request;
  if (id != 0) request.mutable_parameter()->set_id(id);
  request.set_offset(offset);
  request.set_data(std::string(bytes, fill));
  return request;
}

TEST_F(ParameterServiceTest, CreateGetListDelete) {
  absl::StatusOr<RemoteParameter> weight = client_.CreateParameter(
      address_, "layer1.weight", DType::kFloat32, {4, 3}, init::Constant(0.5));
  ASSERT_TRUE(weight.ok()) << weight.status();
  EXPECT_EQ(weight->worker, address_);
  absl::StatusOr<RemoteParameter> bias =
      client_.CreateParameter(address_, "layer1.bias", DType::kBFloat16, {3});
  ASSERT_TRUE(bias.ok()) << bias.status();
  EXPECT_GT(bias->id, weight->id);

  absl::StatusOr<ParameterInfo> info = client_.GetParameter(*weight);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name, "layer1.weight");
  EXPECT_EQ(info->dtype, DType::kFloat32);
  EXPECT_EQ(info->shape, (Shape{4, 3}));
  EXPECT_EQ(info->num_elements, 12);
  EXPECT_EQ(info->byte_size, 48);
  EXPECT_TRUE(info->device.is_cpu());
  EXPECT_EQ(info->version, 1u);

  absl::StatusOr<Tensor> values = client_.ReadParameter(*weight);
  ASSERT_TRUE(values.ok());
  for (float v : values->host_span<float>()) EXPECT_EQ(v, 0.5f);

  absl::StatusOr<RemoteParameter> by_name =
      client_.FindParameter(address_, "layer1.bias");
  ASSERT_TRUE(by_name.ok());
  EXPECT_EQ(*by_name, *bias);

  client_.CreateParameter(address_, "layer2.weight", DType::kFloat16, {2})
      .IgnoreError();
  absl::StatusOr<std::vector<ParameterInfo>> layer1 =
      client_.ListParameters(address_, "layer1.");
  ASSERT_TRUE(layer1.ok());
  ASSERT_THAT(*layer1, SizeIs(2));
  EXPECT_EQ((*layer1)[0].name, "layer1.weight");
  EXPECT_EQ((*layer1)[1].name, "layer1.bias");
  EXPECT_THAT(*client_.ListParameters(address_), SizeIs(3));

  absl::StatusOr<ParameterInfo> deleted = client_.DeleteParameter(*weight);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted->name, "layer1.weight");
  EXPECT_EQ(client_.GetParameter(*weight).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(*client_.ListParameters(address_), SizeIs(2));
  // Ids are never reused, and the name is free again.
  absl::StatusOr<RemoteParameter> again =
      client_.CreateParameter(address_, "layer1.weight", DType::kFloat32, {1});
  ASSERT_TRUE(again.ok());
  EXPECT_GT(again->id, bias->id);
}

TEST_F(ParameterServiceTest, ListPagesThroughManyParameters) {
  for (int i = 0; i < 2500; ++i) {
    ASSERT_TRUE(client_
                    .CreateParameter(address_, "p" + std::to_string(i),
                                     DType::kFloat32, {})
                    .ok());
  }
  absl::StatusOr<std::vector<ParameterInfo>> all =
      client_.ListParameters(address_);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_THAT(*all, SizeIs(2500));
  for (int i = 0; i < 2500; ++i) {
    ASSERT_EQ((*all)[i].name, "p" + std::to_string(i));
  }
  grpc::ClientContext context;
  v1::ListParametersRequest request;
  request.set_page_size(1000);
  v1::ListParametersResponse page;
  ASSERT_TRUE(
      ParameterServiceClient()->ListParameters(&context, request, &page).ok());
  EXPECT_EQ(page.parameters_size(), 1000);
  EXPECT_FALSE(page.next_page_token().empty());
}

TEST_F(ParameterServiceTest, InitializersFillAsAsked) {
  const Shape shape = {1000};
  auto read = [&](const v1::Initializer& init, DType dtype,
                  const std::string& name) {
    absl::StatusOr<RemoteParameter> p =
        client_.CreateParameter(address_, name, dtype, shape, init);
    EXPECT_TRUE(p.ok()) << p.status();
    return *client_.ReadParameter(*p);
  };
  Tensor zeros = read(init::Zeros(), DType::kFloat32, "z");
  for (float v : zeros.host_span<float>()) EXPECT_EQ(v, 0.0f);

  Tensor half = read(init::Constant(0.1), DType::kFloat16, "h");
  for (uint16_t v : half.host_span<uint16_t>()) {
    EXPECT_EQ(v, FloatToHalf(0.1f));
  }

  Tensor ints = read(init::Constant(-7), DType::kInt64, "i");
  for (int64_t v : ints.host_span<int64_t>()) EXPECT_EQ(v, -7);

  Tensor uniform = read(init::Uniform(-2, 3, 42), DType::kFloat32, "u");
  double sum = 0;
  for (float v : uniform.host_span<float>()) {
    EXPECT_GE(v, -2.0f);
    EXPECT_LE(v, 3.0f);
    sum += v;
  }
  EXPECT_NEAR(sum / 1000, 0.5, 0.2);
  // Same seed, same values; another seed, other values.
  EXPECT_TRUE(SameBytes(
      uniform, read(init::Uniform(-2, 3, 42), DType::kFloat32, "u_again")));
  EXPECT_FALSE(SameBytes(
      uniform, read(init::Uniform(-2, 3, 43), DType::kFloat32, "u_other")));

  Tensor normal = read(init::Normal(1, 2, 7), DType::kBFloat16, "n");
  double mean = 0;
  double square = 0;
  for (uint16_t v : normal.host_span<uint16_t>()) {
    const double x = BFloat16ToFloat(v);
    mean += x / 1000;
    square += x * x / 1000;
  }
  EXPECT_NEAR(mean, 1.0, 0.25);
  EXPECT_NEAR(std::sqrt(square - mean * mean), 2.0, 0.25);
}

TEST_F(ParameterServiceTest, ExplicitValuesAndWritesRoundTrip) {
  // Small: travels inside CreateParameter.
  Tensor small = Ramp({2, 5}, -1.0f, 0.25f);
  absl::StatusOr<RemoteParameter> p =
      client_.CreateParameterFrom(address_, "small", small);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(SameBytes(*client_.ReadParameter(*p), small));

  // 0-d.
  Tensor scalar = Ramp({}, 3.5f);
  absl::StatusOr<RemoteParameter> s =
      client_.CreateParameterFrom(address_, "scalar", scalar);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(SameBytes(*client_.ReadParameter(*s), scalar));

  // Empty.
  Tensor empty = *Tensor::AllocateHost(DType::kFloat32, {0, 4});
  absl::StatusOr<RemoteParameter> e =
      client_.CreateParameterFrom(address_, "empty", empty);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(SameBytes(*client_.ReadParameter(*e), empty));
  EXPECT_TRUE(client_.WriteParameter(*e, empty).ok());

  // Large (odd size, 5 MiB + 3 floats): created, then streamed in chunks.
  Tensor large = Ramp({(5 << 20) / 4 * 4 + 3}, 0.0f, 0.5f);
  absl::StatusOr<RemoteParameter> l =
      client_.CreateParameterFrom(address_, "large", large);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(SameBytes(*client_.ReadParameter(*l), large));

  Tensor replacement = Ramp(large.shape(), 1.0f, -0.25f);
  absl::StatusOr<ParameterInfo> written =
      client_.WriteParameter(*l, replacement);
  ASSERT_TRUE(written.ok()) << written.status();
  // Created (1), streamed in by CreateParameterFrom (2), replaced (3).
  EXPECT_EQ(written->version, 3u);
  EXPECT_TRUE(SameBytes(*client_.ReadParameter(*l), replacement));
}

TEST_F(ParameterServiceTest, ChunksMayArriveInAnyOrder) {
  absl::StatusOr<RemoteParameter> p =
      client_.CreateParameter(address_, "p", DType::kFloat32, {4});
  ASSERT_TRUE(p.ok());
  const Tensor values = Ramp({4}, 10.0f);
  const char* bytes = static_cast<const char*>(values.data());
  v1::WriteParameterRequest second;
  second.mutable_parameter()->set_id(p->id);
  second.set_offset(8);
  second.set_data(bytes + 8, 8);
  v1::WriteParameterRequest first;
  first.set_offset(0);
  first.set_data(bytes, 8);
  ASSERT_TRUE(RawWrite({second, first}).ok());
  EXPECT_TRUE(SameBytes(*client_.ReadParameter(*p), values));
}

TEST_F(ParameterServiceTest, GetParameterReturnsSmallValuesInline) {
  Tensor values = Ramp({6}, 2.0f);
  absl::StatusOr<RemoteParameter> p =
      client_.CreateParameterFrom(address_, "p", values);
  ASSERT_TRUE(p.ok());
  grpc::ClientContext context;
  v1::GetParameterRequest request;
  request.mutable_parameter()->set_name("p");
  request.set_include_values(true);
  v1::GetParameterResponse response;
  ASSERT_TRUE(ParameterServiceClient()
                  ->GetParameter(&context, request, &response)
                  .ok());
  absl::StatusOr<Tensor> inline_values =
      TensorFromProto(response.values(), "values");
  ASSERT_TRUE(inline_values.ok()) << inline_values.status();
  EXPECT_TRUE(SameBytes(*inline_values, values));
}

// --- Bad input: the right code, a message naming the field and what was
// expected, no change of state, and the daemon keeps serving.

TEST_F(ParameterServiceTest, DuplicateNameIsAlreadyExists) {
  Tensor values = Ramp({2}, 1.0f);
  absl::StatusOr<RemoteParameter> p =
      client_.CreateParameterFrom(address_, "w", values);
  ASSERT_TRUE(p.ok());
  absl::StatusOr<RemoteParameter> again =
      client_.CreateParameter(address_, "w", DType::kFloat32, {9});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(
      again.status().message(),
      AllOf(HasSubstr("name"), HasSubstr("\"w\""), HasSubstr(address_)));
  EXPECT_TRUE(SameBytes(*client_.ReadParameter(*p), values));
  EXPECT_THAT(*client_.ListParameters(address_), SizeIs(1));
  ExpectStillServing();
}

TEST_F(ParameterServiceTest, UnknownIdOrNameIsNotFound) {
  const RemoteParameter unknown{address_, 12345};
  EXPECT_EQ(client_.GetParameter(unknown).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(client_.GetParameter(unknown).status().message(),
              HasSubstr("parameter.id: no parameter with id 12345"));
  EXPECT_EQ(client_.ReadParameter(unknown).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client_.WriteParameter(unknown, Ramp({1})).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client_.DeleteParameter(unknown).status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<RemoteParameter> by_name =
      client_.FindParameter(address_, "nope");
  EXPECT_EQ(by_name.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(by_name.status().message(), HasSubstr("parameter.name"));
  // A request naming no parameter at all.
  grpc::ClientContext context;
  v1::GetParameterRequest request;
  v1::GetParameterResponse response;
  grpc::Status status =
      ParameterServiceClient()->GetParameter(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("expected one of them"));
  ExpectStillServing();
}

TEST_F(ParameterServiceTest, BadCreateRequestsAreInvalidArgument) {
  struct Case {
    std::string what;
    v1::CreateParameterRequest request;
    std::string expected_in_message;
  };
  std::vector<Case> cases;
  auto base = [] {
    v1::CreateParameterRequest r;
    r.set_name("bad");
    r.set_dtype(v1::DTYPE_FLOAT32);
    r.add_shape(4);
    return r;
  };
  {
    Case c{"empty name", base(), "name: 0 characters; expected 1 to 256"};
    c.request.set_name("");
    cases.push_back(c);
  }
  {
    Case c{"control character", base(), "not printable"};
    c.request.set_name("a\nb");
    cases.push_back(c);
  }
  {
    Case c{"negative dimension", base(), "shape[1]: dimension -3"};
    c.request.add_shape(-3);
    cases.push_back(c);
  }
  {
    Case c{"element-count overflow", base(), "overflows"};
    c.request.clear_shape();
    c.request.add_shape(int64_t{1} << 40);
    c.request.add_shape(int64_t{1} << 40);
    cases.push_back(c);
  }
  {
    Case c{"unspecified dtype", base(), "dtype"};
    c.request.set_dtype(v1::DTYPE_UNSPECIFIED);
    cases.push_back(c);
  }
  {
    Case c{"unknown dtype", base(), "expected DTYPE_FLOAT32"};
    c.request.set_dtype(static_cast<v1::DType>(99));
    cases.push_back(c);
  }
  {
    Case c{"values too short", base(),
           "initializer.values.data: 15 bytes; expected 16"};
    c.request.mutable_initializer()->mutable_values()->set_data(
        std::string(15, '\0'));
    cases.push_back(c);
  }
  {
    Case c{"values too long", base(), "expected 16"};
    c.request.mutable_initializer()->mutable_values()->set_data(
        std::string(20, '\0'));
    cases.push_back(c);
  }
  {
    Case c{"NaN constant", base(), "initializer.constant.value"};
    c.request.mutable_initializer()->mutable_constant()->set_value(
        std::numeric_limits<double>::quiet_NaN());
    cases.push_back(c);
  }
  {
    Case c{"uniform low > high", base(), "expected low <= high"};
    *c.request.mutable_initializer() = init::Uniform(2, 1, 0);
    cases.push_back(c);
  }
  {
    Case c{"negative stddev", base(), "initializer.normal.stddev"};
    *c.request.mutable_initializer() = init::Normal(0, -1, 0);
    cases.push_back(c);
  }
  {
    Case c{"random int64", base(), "initializer.uniform"};
    c.request.set_dtype(v1::DTYPE_INT64);
    *c.request.mutable_initializer() = init::Uniform(0, 1, 0);
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    grpc::Status status = RawCreate(c.request);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.what;
    EXPECT_THAT(status.error_message(), HasSubstr(c.expected_in_message))
        << c.what;
  }
  EXPECT_THAT(*client_.ListParameters(address_), SizeIs(0));
  ExpectStillServing();
}

TEST_F(ParameterServiceTest, BadWritesLeaveTheParameterUnchanged) {
  const Tensor original = Ramp({4}, 1.0f);  // 16 bytes.
  absl::StatusOr<RemoteParameter> p =
      client_.CreateParameterFrom(address_, "p", original);
  ASSERT_TRUE(p.ok());
  const uint64_t id = p->id;
  struct Case {
    std::string what;
    std::vector<v1::WriteParameterRequest> messages;
    std::string expected_in_message;
  };
  v1::WriteParameterRequest wrong_dtype = Chunk(id, 0, 16);
  wrong_dtype.set_dtype(v1::DTYPE_FLOAT16);
  wrong_dtype.add_shape(8);
  v1::WriteParameterRequest unknown_dtype = Chunk(id, 0, 16);
  unknown_dtype.set_dtype(static_cast<v1::DType>(77));
  v1::WriteParameterRequest wrong_shape = Chunk(id, 0, 16);
  wrong_shape.set_dtype(v1::DTYPE_FLOAT32);
  wrong_shape.add_shape(2);
  wrong_shape.add_shape(2);
  v1::WriteParameterRequest other_parameter = Chunk(0, 8, 8);
  other_parameter.mutable_parameter()->set_name("another");
  const std::vector<Case> cases = {
      {"out of range", {Chunk(id, 8, 8), Chunk(0, 16, 4)}, "outside"},
      {"negative offset", {Chunk(id, -4, 4)}, "outside"},
      {"past the end", {Chunk(id, 0, 20)}, "outside"},
      {"overlapping", {Chunk(id, 0, 12), Chunk(0, 8, 8)}, "overlaps"},
      {"overlapping before", {Chunk(id, 8, 8), Chunk(0, 4, 8)}, "overlaps"},
      {"duplicate", {Chunk(id, 0, 8), Chunk(0, 0, 8)}, "overlaps"},
      {"misaligned", {Chunk(id, 2, 4)}, "multiples of 4"},
      {"ends short", {Chunk(id, 0, 8)}, "ended after 8 of 16 bytes"},
      {"gap", {Chunk(id, 0, 4), Chunk(0, 8, 8)}, "first missing byte: 4"},
      {"empty chunk", {Chunk(id, 0, 16), Chunk(0, 0, 0)}, "empty chunk"},
      {"empty stream", {}, "stream was empty"},
      {"wrong dtype", {wrong_dtype}, "dtype: DTYPE_FLOAT16"},
      {"unknown dtype", {unknown_dtype}, "dtype: unknown value 77;"},
      {"wrong shape", {wrong_shape}, "shape: [2, 2]"},
      {"another parameter",
       {Chunk(id, 0, 8), other_parameter},
       "names another parameter"},
  };
  for (const Case& c : cases) {
    grpc::Status status = RawWrite(c.messages);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.what << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.expected_in_message))
        << c.what;
    absl::StatusOr<ParameterInfo> info = client_.GetParameter(*p);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->version, 1u) << c.what;
    EXPECT_TRUE(SameBytes(*client_.ReadParameter(*p), original)) << c.what;
  }
  // The client library checks the layout too.
  EXPECT_EQ(client_.WriteParameter(*p, Ramp({5})).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExpectStillServing();
  // And a good write still works.
  ASSERT_TRUE(client_.WriteParameter(*p, Ramp({4}, 9.0f)).ok());
  EXPECT_TRUE(SameBytes(*client_.ReadParameter(*p), Ramp({4}, 9.0f)));
}

// A writer that names the parameter by id may name it by name later (or
// the other way round): it is the same parameter.
TEST_F(ParameterServiceTest, LaterMessagesMayNameTheParameterEitherWay) {
  absl::StatusOr<RemoteParameter> p =
      client_.CreateParameterFrom(address_, "p", Ramp({4}, 1.0f));
  ASSERT_TRUE(p.ok());
  v1::WriteParameterRequest by_name = Chunk(0, 8, 8);
  by_name.mutable_parameter()->set_name("p");
  ASSERT_TRUE(RawWrite({Chunk(p->id, 0, 8), by_name}).ok());
  v1::WriteParameterRequest first_by_name = Chunk(0, 0, 8);
  first_by_name.mutable_parameter()->set_name("p");
  grpc::Status status = RawWrite({first_by_name, Chunk(p->id, 8, 8)});
  EXPECT_TRUE(status.ok()) << status.error_message();
  absl::StatusOr<ParameterInfo> info = client_.GetParameter(*p);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->version, 3u);
  // Another parameter's id is still another parameter.
  absl::StatusOr<RemoteParameter> q =
      client_.CreateParameterFrom(address_, "q", Ramp({4}, 1.0f));
  ASSERT_TRUE(q.ok());
  status = RawWrite({Chunk(p->id, 0, 8), Chunk(q->id, 8, 8)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("names another parameter"));
}

TEST_F(ParameterServiceTest, BadReadAndListRequestsAreInvalidArgument) {
  ASSERT_TRUE(
      client_.CreateParameter(address_, "p", DType::kFloat32, {4}).ok());
  for (int64_t chunk_bytes : {int64_t{-1}, int64_t{(1 << 20) + 1}}) {
    grpc::ClientContext context;
    v1::ReadParameterRequest request;
    request.mutable_parameter()->set_name("p");
    request.set_chunk_bytes(chunk_bytes);
    auto reader = ParameterServiceClient()->ReadParameter(&context, request);
    v1::ParameterChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("chunk_bytes"));
  }
  {
    grpc::ClientContext context;
    v1::ListParametersRequest request;
    request.set_page_size(-5);
    v1::ListParametersResponse response;
    grpc::Status status =
        ParameterServiceClient()->ListParameters(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("page_size"));
  }
  {
    grpc::ClientContext context;
    v1::ListParametersRequest request;
    request.set_page_token("garbage");
    v1::ListParametersResponse response;
    grpc::Status status =
        ParameterServiceClient()->ListParameters(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("page_token"));
  }
  ExpectStillServing();
}

TEST_F(ParameterServiceTest, LargeInlineGetIsRefusedWithAHint) {
  absl::StatusOr<RemoteParameter> p = client_.CreateParameter(
      address_, "big", DType::kFloat32, {1 << 20});  // 4 MiB.
  ASSERT_TRUE(p.ok());
  grpc::ClientContext context;
  v1::GetParameterRequest request;
  request.mutable_parameter()->set_id(p->id);
  request.set_include_values(true);
  v1::GetParameterResponse response;
  grpc::Status status =
      ParameterServiceClient()->GetParameter(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("use ReadParameter"));
  ExpectStillServing();
}

class LimitedWorkerTest : public ParameterServiceTest {
 protected:
  std::vector<std::string> WorkerFlags() const override {
    return {"--max_tensor_bytes=4096", "--max_total_bytes=10000"};
  }
};

TEST_F(LimitedWorkerTest, LimitsAreResourceExhausted) {
  absl::StatusOr<RemoteParameter> too_big =
      client_.CreateParameter(address_, "too_big", DType::kFloat32, {1025});
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(too_big.status().message(),
              AllOf(HasSubstr("4100 bytes"), HasSubstr("--max_tensor_bytes")));

  ASSERT_TRUE(
      client_.CreateParameter(address_, "a", DType::kFloat32, {1024}).ok());
  ASSERT_TRUE(
      client_.CreateParameter(address_, "b", DType::kFloat32, {1024}).ok());
  absl::StatusOr<RemoteParameter> over_total =
      client_.CreateParameter(address_, "c", DType::kFloat32, {1024});
  EXPECT_EQ(over_total.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over_total.status().message(), HasSubstr("--max_total_bytes"));
  EXPECT_THAT(*client_.ListParameters(address_), SizeIs(2));

  // A write needs room for its staging copy: 8192 + 4096 > 10000.
  absl::StatusOr<RemoteParameter> a = client_.FindParameter(address_, "a");
  absl::StatusOr<ParameterInfo> write =
      client_.WriteParameter(*a, Ramp({1024}));
  EXPECT_EQ(write.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(client_.GetParameter(*a)->version, 1u);

  // Deleting frees the budget.
  ASSERT_TRUE(
      client_.DeleteParameter(*client_.FindParameter(address_, "b")).ok());
  EXPECT_TRUE(client_.WriteParameter(*a, Ramp({1024})).ok());
  EXPECT_TRUE(
      client_.CreateParameter(address_, "c", DType::kFloat32, {1024}).ok());
}

}  // namespace
}  // namespace distopt
