// GET http://HOST:PORT/PATH over plain HTTP/1.1 (Connection: close), for
// tests and benchmarks that read /metrics or Prometheus's HTTP API.
#ifndef DISTOPT_COMMON_TESTING_HTTP_GET_H_
#define DISTOPT_COMMON_TESTING_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace distopt {
namespace testing {

struct HttpReply {
  int status = 0;  // 200, 404, ...
  std::string body;
};

// `address` is "HOST:PORT" (an IPv4 address or a name). UNAVAILABLE when
// the connection fails, DATA_LOSS when the reply is not HTTP.
absl::StatusOr<HttpReply> HttpGet(const std::string& address,
                                  const std::string& path,
                                  absl::Duration timeout = absl::Seconds(5));

// `text` with every byte but [A-Za-z0-9-_.~] percent-encoded, for a query.
std::string UrlEncoded(const std::string& text);

}  // namespace testing
}  // namespace distopt

#endif  // DISTOPT_COMMON_TESTING_HTTP_GET_H_
