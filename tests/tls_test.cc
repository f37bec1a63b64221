// TLS, mutual TLS and bearer tokens between the client and a real daemon.
// The certificates are made for each run with the openssl command line.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/local_worker.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

using ::distopt::testing::Ramp;
using ::distopt::testing::SameBytes;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// A CA, a server certificate for 127.0.0.1 and a client certificate.
class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(
        std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
        "/tls"));
    const std::string script = absl::StrCat(
        "set -e; mkdir -p ", *dir_, "; cd ", *dir_, "; ",
        "key='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'; ",
        "openssl req -x509 $key -keyout ca.key -out ca.pem -days 2 "
        "-subj '/CN=distopt test CA' 2>/dev/null; ",
        "for who in server client; do ",
        "openssl req $key -keyout $who.key -out $who.csr "
        "-subj \"/CN=$who\" 2>/dev/null; done; ",
        "echo 'subjectAltName=IP:127.0.0.1' > server.ext; ",
        "echo 'extendedKeyUsage=clientAuth' > client.ext; ",
        "for who in server client; do ",
        "openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -out $who.pem -days 2 -extfile $who.ext "
        "2>/dev/null; done; ",
        "echo '  s3cret-token  ' > token");
    ASSERT_EQ(std::system(script.c_str()), 0) << script;
  }

  static std::string Path(const std::string& name) {
    return *dir_ + "/" + name;
  }

  std::vector<std::string> TlsFlags() {
    return {"--tls_cert_file=" + Path("server.pem"),
            "--tls_key_file=" + Path("server.key")};
  }

  ClientOptions TlsClientOptions() {
    ClientOptions options;
    options.tls_root_certs = ReadFile(Path("ca.pem"));
    options.rpc_timeout = absl::Seconds(5);
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
  std::vector<std::string> flags = TlsFlags();
  flags.push_back("--auth_token_file=" + Path("token"));
  std::unique_ptr<LocalWorker> worker = testing::StartWorkerOrDie(flags);
  ASSERT_NE(worker, nullptr);
  {
    ClientOptions options = TlsClientOptions();
    options.auth_token = "s3cret-token";
    Client client(options);
    EXPECT_TRUE(RoundTrip(client, worker->address()).ok());
    // Steps travel on a stream: the daemon answers it (no such optimizer).
    EXPECT_EQ(client.Step(worker->address(), 12345, client.NewContextId())
                  .status()
                  .code(),
              absl::StatusCode::kNotFound);
  }
  {
    ClientOptions options = TlsClientOptions();
    options.auth_token = "wrong";
    Client client(options);
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
  std::vector<std::string> flags = TlsFlags();
  flags.push_back("--tls_client_ca_file=" + Path("ca.pem"));
  std::unique_ptr<LocalWorker> worker = testing::StartWorkerOrDie(flags);
  ASSERT_NE(worker, nullptr);
  {
    ClientOptions options = TlsClientOptions();
    options.tls_client_cert = ReadFile(Path("client.pem"));
    options.tls_client_key = ReadFile(Path("client.key"));
    Client client(options);
    EXPECT_TRUE(RoundTrip(client, worker->address()).ok());
  }
  {
    Client client(TlsClientOptions());
    EXPECT_FALSE(RoundTrip(client, worker->address()).ok());
  }
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
