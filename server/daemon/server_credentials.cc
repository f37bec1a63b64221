#include "server/daemon/server_credentials.h"

#include <string>

#include "grpcpp/security/auth_metadata_processor.h"
#include "server/daemon/flag_files.h"
#include "server/services/metadata_secret.h"

namespace distopt {
namespace {

// Accepts a call only with "authorization: Bearer <token>".
class BearerTokenChecker : public grpc::AuthMetadataProcessor {
 public:
  explicit BearerTokenChecker(std::string token)
      : expected_("Bearer " + std::move(token)) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*,
                       OutputMetadata* consumed, OutputMetadata*) override {
    switch (CheckSecret(metadata, "authorization", expected_)) {
      case SecretCheck::kMatches:
        consumed->insert({"authorization", expected_});
        return grpc::Status::OK;
      case SecretCheck::kRepeated:
        return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                            "authorization: more than one; expected one "
                            "\"Bearer <token>\"");
      case SecretCheck::kMissing:
        return grpc::Status(
            grpc::StatusCode::UNAUTHENTICATED,
            "authorization: missing; expected \"Bearer <token>\" metadata");
      case SecretCheck::kWrong:
        break;
    }
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "authorization: the bearer token is not valid");
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
        ReadSecretFile(options.auth_token_file, "--auth_token_file", 1);
    if (!token.ok()) return token.status();
    credentials->SetAuthMetadataProcessor(
        std::make_shared<BearerTokenChecker>(*std::move(token)));
  }
  return credentials;
}

}  // namespace distopt
