#include "server/daemon/server_credentials.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/auth_metadata_processor.h"

namespace distopt {
namespace {

absl::StatusOr<std::string> ReadFlagFile(const std::string& path,
                                         absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", path, ": cannot read it"));
  }
  if (contents.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "=", path, ": missing or empty; expected a readable file"));
  }
  return contents.str();
}

// Compares without an early exit, so timing does not reveal the token.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference |= a[i] ^ b[i];
  return difference == 0;
}

// Accepts a call only with "authorization: Bearer <token>".
class BearerTokenChecker : public grpc::AuthMetadataProcessor {
 public:
  explicit BearerTokenChecker(std::string token)
      : expected_("Bearer " + std::move(token)) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*,
                       OutputMetadata* consumed, OutputMetadata*) override {
    auto it = metadata.find("authorization");
    if (it == metadata.end()) {
      return grpc::Status(
          grpc::StatusCode::UNAUTHENTICATED,
          "authorization: missing; expected \"Bearer <token>\" metadata");
    }
    const absl::string_view given(it->second.data(), it->second.size());
    if (!ConstantTimeEquals(given, expected_)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "authorization: the bearer token is not valid");
    }
    consumed->insert({"authorization", std::string(given)});
    return grpc::Status::OK;
  }

 private:
  const std::string expected_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const WorkerOptions& options) {
  if (options.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  absl::StatusOr<std::string> cert =
      ReadFlagFile(options.tls_cert_file, "--tls_cert_file");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key =
      ReadFlagFile(options.tls_key_file, "--tls_key_file");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl(
      GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!options.tls_client_ca_file.empty()) {
    absl::StatusOr<std::string> ca =
        ReadFlagFile(options.tls_client_ca_file, "--tls_client_ca_file");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::SslServerCredentials(ssl);
  if (!options.auth_token_file.empty()) {
    absl::StatusOr<std::string> token =
        ReadFlagFile(options.auth_token_file, "--auth_token_file");
    if (!token.ok()) return token.status();
    const std::string trimmed(absl::StripAsciiWhitespace(*token));
    if (trimmed.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_token_file=", options.auth_token_file,
                       ": holds only whitespace; expected a token"));
    }
    credentials->SetAuthMetadataProcessor(
        std::make_shared<BearerTokenChecker>(trimmed));
  }
  return credentials;
}

}  // namespace distopt
