#include "tools/distoptctl/connection.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace distopt {
namespace distoptctl {
namespace {

// The contents of the file that flag `flag` names.
absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag,
                                         const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  if (in.is_open()) contents << in.rdbuf();
  if (!in.is_open() || in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", path, ": cannot read it: ", std::strerror(errno)));
  }
  if (contents.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": the file is empty"));
  }
  return contents.str();
}

}  // namespace

absl::StatusOr<ClientOptions> MakeClientOptions(const ConnectionFlags& flags) {
  if (flags.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout=", absl::FormatDuration(flags.timeout),
                     ": expected a positive duration"));
  }
  if (flags.tls_cert_file.empty() != flags.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together");
  }
  if (flags.tls_ca_file.empty() &&
      !(flags.tls_cert_file.empty() && flags.token_file.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        flags.token_file.empty() ? "--tls_cert_file" : "--token_file",
        " needs --tls_ca_file: gRPC sends no credentials over plaintext"));
  }
  ClientOptions options;
  options.rpc_timeout = flags.timeout;
  const struct {
    absl::string_view flag;
    const std::string& path;
    std::string* contents;
  } files[] = {{"tls_ca_file", flags.tls_ca_file, &options.tls_root_certs},
               {"tls_cert_file", flags.tls_cert_file, &options.tls_client_cert},
               {"tls_key_file", flags.tls_key_file, &options.tls_client_key},
               {"token_file", flags.token_file, &options.auth_token}};
  for (const auto& file : files) {
    if (file.path.empty()) continue;
    absl::StatusOr<std::string> contents = ReadFlagFile(file.flag, file.path);
    if (!contents.ok()) return contents.status();
    *file.contents = *std::move(contents);
  }
  absl::StripAsciiWhitespace(&options.auth_token);
  if (!flags.token_file.empty() && options.auth_token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file=", flags.token_file, ": holds no token"));
  }
  return options;
}

}  // namespace distoptctl
}  // namespace distopt
