// TLS, mutual TLS and bearer tokens between the client and a real daemon.
// The certificates are made for each run with the openssl command line.
#include <string>

#include "client/client.h"
#include "client/local_worker.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/distopt/v1/parameter.grpc.pb.h"
#include "tests/test_certificates.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::kTestToken;
using ::distopt::testing::Ramp;
using ::distopt::testing::ReadTestFile;
using ::distopt::testing::SameBytes;
using ::testing::HasSubstr;

// A CA, a server certificate for 127.0.0.1 and two client certificates
// (CN=client, CN=other): tests/test_certificates.h.
class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::MakeTestCertificates("tls"));
    ASSERT_FALSE(dir_->empty()) << "openssl could not make the certificates";
  }

  static std::string Path(const std::string& name) {
    return *dir_ + "/" + name;
  }

  std::vector<std::string> TlsFlags() { return testing::TlsWorkerFlags(*dir_); }

  ClientOptions TlsClientOptions() {
    ClientOptions options;
    options.tls_root_certs = ReadTestFile(Path("ca.pem"));
    options.rpc_timeout = absl::Seconds(5);
    return options;
  }

  // A worker that requires a client certificate from the test CA.
  std::unique_ptr<LocalWorker> StartMutualTlsWorker() {
    std::vector<std::string> flags = TlsFlags();
    flags.push_back("--tls_client_ca_file=" + Path("ca.pem"));
    return testing::StartWorkerOrDie(flags);
  }

  // A TLS worker that requires the bearer token in Path("token").
  std::unique_ptr<LocalWorker> StartTokenWorker() {
    std::vector<std::string> flags = TlsFlags();
    flags.push_back("--auth_token_file=" + Path("token"));
    return testing::StartWorkerOrDie(flags);
  }

  // TLS options presenting `token` (by default the right one).
  ClientOptions TokenClientOptions(const std::string& token = kTestToken) {
    ClientOptions options = TlsClientOptions();
    options.auth_token = token;
    return options;
  }

  // Options presenting the certificate of `who` ("client", "other").
  ClientOptions MutualTlsClientOptions(const std::string& who) {
    ClientOptions options = TlsClientOptions();
    options.tls_client_cert = ReadTestFile(Path(who + ".pem"));
    options.tls_client_key = ReadTestFile(Path(who + ".key"));
    return options;
  }

  // Creates, writes and reads a parameter; returns the first failure.
  static absl::Status RoundTrip(Client& client, const std::string& address) {
    static int counter = 0;
    const Tensor values = Ramp({5}, 1.0f);
    absl::StatusOr<RemoteParameter> p = client.CreateParameterFrom(
        address, "p" + std::to_string(counter++), values);
    if (!p.ok()) return p.status();
    absl::StatusOr<Tensor> read = client.ReadParameter(*p);
    if (!read.ok()) return read.status();
    EXPECT_TRUE(SameBytes(*read, values));
    return absl::OkStatus();
  }

  static std::string* dir_;
};

std::string* TlsTest::dir_ = nullptr;

TEST_F(TlsTest, TlsWorkerServesTlsClientsOnly) {
  std::unique_ptr<LocalWorker> worker = testing::StartWorkerOrDie(TlsFlags());
  ASSERT_NE(worker, nullptr);
  {
    Client client(TlsClientOptions());
    EXPECT_TRUE(RoundTrip(client, worker->address()).ok());
  }
  {
    ClientOptions plaintext;
    plaintext.rpc_timeout = absl::Seconds(2);
    Client client(plaintext);
    EXPECT_EQ(RoundTrip(client, worker->address()).code(),
              absl::StatusCode::kUnavailable);
  }
}

TEST_F(TlsTest, BearerTokenIsRequiredWhenConfigured) {
  std::unique_ptr<LocalWorker> worker = StartTokenWorker();
  ASSERT_NE(worker, nullptr);
  {
    Client client(TokenClientOptions());
    EXPECT_TRUE(RoundTrip(client, worker->address()).ok());
    // Steps travel on a stream: the daemon answers it (no such optimizer).
    EXPECT_EQ(client.Step(worker->address(), 12345, client.NewContextId())
                  .status()
                  .code(),
              absl::StatusCode::kNotFound);
  }
  {
    Client client(TokenClientOptions("wrong"));
    absl::Status status = RoundTrip(client, worker->address());
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(status.message(), HasSubstr("not valid"));
    status =
        client.Step(worker->address(), 12345, client.NewContextId()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(status.message(), HasSubstr("not valid"));
  }
  {
    Client client(TlsClientOptions());
    absl::Status status = RoundTrip(client, worker->address());
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(status.message(), HasSubstr("authorization: missing"));
  }
}

TEST_F(TlsTest, MutualTlsRequiresAClientCertificate) {
  std::unique_ptr<LocalWorker> worker = StartMutualTlsWorker();
  ASSERT_NE(worker, nullptr);
  {
    Client client(MutualTlsClientOptions("client"));
    EXPECT_TRUE(RoundTrip(client, worker->address()).ok());
  }
  {
    Client client(TlsClientOptions());
    EXPECT_FALSE(RoundTrip(client, worker->address()).ok());
  }
}

// A call carrying two tokens is refused even when one is right: a check
// that read the other could be fooled.
TEST_F(TlsTest, TwoBearerTokensAreRefused) {
  std::unique_ptr<LocalWorker> worker = StartTokenWorker();
  ASSERT_NE(worker, nullptr);
  Client client(TokenClientOptions());
  auto stub = v1::ParameterService::NewStub(client.Channel(worker->address()));
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer wrong");
  v1::ListParametersResponse response;
  grpc::Status status =
      stub->ListParameters(&context, v1::ListParametersRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(status.error_message(), HasSubstr("more than one"));
}

// Under mutual TLS an autograd context belongs to the certificate that made
// it: another client can neither read, add to, step with nor release it,
// nor see it listed.
TEST_F(TlsTest, UnderMutualTlsAContextIsItsMakersAlone) {
  std::unique_ptr<LocalWorker> worker = StartMutualTlsWorker();
  ASSERT_NE(worker, nullptr);
  auto client_as = [&](const std::string& who) {
    return std::make_unique<Client>(MutualTlsClientOptions(who));
  };
  std::unique_ptr<Client> owner = client_as("client");
  std::unique_ptr<Client> other = client_as("other");
  const std::string address = worker->address();
  absl::StatusOr<RemoteParameter> w =
      owner->CreateParameterFrom(address, "w", Ramp({4}));
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<v1::OptimizerInfo> sgd =
      owner->CreateOptimizer(address, "sgd", {}, {w->id});
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  const uint64_t context_id = owner->NewContextId();
  ASSERT_TRUE(
      owner->AccumulateGradients(address, context_id, {{w->id, Ramp({4})}})
          .ok());

  const auto denied = absl::StatusCode::kPermissionDenied;
  EXPECT_EQ(other->GetGradients(address, context_id).status().code(), denied);
  EXPECT_EQ(
      other->AccumulateGradients(address, context_id, {{w->id, Ramp({4})}})
          .code(),
      denied);
  EXPECT_EQ(other->Step(address, sgd->id(), context_id).status().code(),
            denied);
  EXPECT_EQ(other->ReleaseContext(address, context_id).status().code(), denied);
  EXPECT_EQ(testing::ListContexts(*other, address).contexts_size(), 0);
  EXPECT_EQ(testing::ListContexts(*owner, address).contexts_size(), 1);
  // The owner's context is untouched, and still its own.
  absl::StatusOr<std::map<uint64_t, Tensor>> gradients =
      owner->GetGradients(address, context_id);
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  EXPECT_TRUE(SameBytes(gradients->at(w->id), Ramp({4})));
  EXPECT_TRUE(owner->Step(address, sgd->id(), context_id).ok());
  EXPECT_TRUE(*owner->ReleaseContext(address, context_id));
}

TEST_F(TlsTest, InconsistentSecurityFlagsAreRefusedAtStartUp) {
  LocalWorkerOptions options;
  options.flags = {"--auth_token_file=" + Path("token")};
  absl::StatusOr<std::unique_ptr<LocalWorker>> worker =
      LocalWorker::Start(options);
  EXPECT_THAT(worker.status().message(), HasSubstr("exited with code 2"));
  options.flags = {"--tls_cert_file=" + Path("missing.pem"),
                   "--tls_key_file=" + Path("server.key")};
  worker = LocalWorker::Start(options);
  EXPECT_THAT(worker.status().message(), HasSubstr("exited with code 2"));
}

}  // namespace
}  // namespace distopt
