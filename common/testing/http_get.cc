#include "common/testing/http_get.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace distopt {
namespace testing {
namespace {

// A chunked body (Transfer-Encoding: chunked) made whole.
std::string Dechunked(absl::string_view chunked) {
  std::string body;
  while (!chunked.empty()) {
    const size_t line_end = chunked.find("\r\n");
    if (line_end == absl::string_view::npos) break;
    size_t length = 0;
    const std::string size_text(chunked.substr(0, line_end));
    if (!absl::SimpleHexAtoi(size_text.substr(0, size_text.find(';')),
                             &length) ||
        length == 0) {
      break;
    }
    chunked.remove_prefix(line_end + 2);
    absl::StrAppend(&body, chunked.substr(0, length));
    chunked.remove_prefix(std::min(chunked.size(), length + 2));
  }
  return body;
}

}  // namespace

absl::StatusOr<HttpReply> HttpGet(const std::string& address,
                                  const std::string& path,
                                  absl::Duration timeout) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("address: ", address, "; expected HOST:PORT"));
  }
  const std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) {
    return absl::UnavailableError(absl::StrCat(address, ": unknown address"));
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    timeval limit{
        static_cast<time_t>(absl::ToInt64Seconds(timeout)),
        static_cast<suseconds_t>(absl::ToInt64Microseconds(timeout) % 1000000)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat(address, ": cannot connect: ", std::strerror(errno)));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", address,
                   "\r\nConnection: close\r\n\r\n");
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string reply;
  char buffer[16384];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    reply.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  const size_t head_end = reply.find("\r\n\r\n");
  HttpReply parsed;
  const std::vector<std::string> status_line =
      absl::StrSplit(reply.substr(0, reply.find("\r\n")), ' ');
  if (head_end == std::string::npos || status_line.size() < 2 ||
      !absl::StartsWith(status_line[0], "HTTP/") ||
      !absl::SimpleAtoi(status_line[1], &parsed.status)) {
    return absl::DataLossError(absl::StrCat(
        address, path, ": not an HTTP reply (", reply.size(), " bytes)"));
  }
  const std::string head = reply.substr(0, head_end);
  parsed.body = reply.substr(head_end + 4);
  std::string lower_head = head;
  for (char& c : lower_head) c = static_cast<char>(std::tolower(c));
  if (lower_head.find("transfer-encoding: chunked") != std::string::npos) {
    parsed.body = Dechunked(parsed.body);
  }
  return parsed;
}

std::string UrlEncoded(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

}  // namespace testing
}  // namespace distopt
