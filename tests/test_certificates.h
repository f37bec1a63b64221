// Certificates for the tests of TLS, mutual TLS and bearer tokens, made
// for each run with the openssl command line in a folder of the test's
// temporary directory: a CA (ca.pem, ca.key), a server certificate for
// 127.0.0.1 (server.pem, server.key), two client certificates (client.*
// with CN=client, other.* with CN=other), and a bearer token file (token,
// holding kTestToken with whitespace around it).
#ifndef DISTOPT_TESTS_TEST_CERTIFICATES_H_
#define DISTOPT_TESTS_TEST_CERTIFICATES_H_

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace distopt {
namespace testing {

// The token in the folder's token file, without the whitespace.
inline constexpr char kTestToken[] = "s3cret-token";

// Makes the certificates in $TEST_TMPDIR/`name` and returns that folder;
// empty when openssl failed.
inline std::string MakeTestCertificates(const std::string& name) {
  const std::string dir = absl::StrCat(
      std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp", "/",
      name);
  const std::string script = absl::StrCat(
      "set -e; mkdir -p ", dir, "; cd ", dir, "; ",
      "key='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'; ",
      "openssl req -x509 $key -keyout ca.key -out ca.pem -days 2 "
      "-subj '/CN=distopt test CA' 2>/dev/null; ",
      "for who in server client other; do ",
      "openssl req $key -keyout $who.key -out $who.csr "
      "-subj \"/CN=$who\" 2>/dev/null; done; ",
      "echo 'subjectAltName=IP:127.0.0.1' > server.ext; ",
      "echo 'extendedKeyUsage=clientAuth' > client.ext; ",
      "cp client.ext other.ext; ", "for who in server client other; do ",
      "openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key "
      "-CAcreateserial -out $who.pem -days 2 -extfile $who.ext "
      "2>/dev/null; done; ",
      "echo '  ", kTestToken, "  ' > token");
  return std::system(script.c_str()) == 0 ? dir : "";
}

// The flags of a worker serving TLS with the server certificate of `dir`.
inline std::vector<std::string> TlsWorkerFlags(const std::string& dir) {
  return {"--tls_cert_file=" + dir + "/server.pem",
          "--tls_key_file=" + dir + "/server.key"};
}

// A file's contents; empty when it cannot be read.
inline std::string ReadTestFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace testing
}  // namespace distopt

#endif  // DISTOPT_TESTS_TEST_CERTIFICATES_H_
