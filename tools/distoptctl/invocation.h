// Invocation: what every distoptctl command is given (the client, the
// output format, where to print), its exit codes, and how a command
// reports a worker's failure: one line on stderr,
//
//   distoptctl: 127.0.0.1:50051: UNAVAILABLE: GetStatus: failed to connect ...
//
// and, under --json, an "error" object in the document. Commands that take
// several addresses call every worker at once (OnEveryWorker): one dead
// worker costs one timeout, not one per worker.
#ifndef DISTOPT_TOOLS_DISTOPTCTL_INVOCATION_H_
#define DISTOPT_TOOLS_DISTOPTCTL_INVOCATION_H_

#include <functional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/client.h"
#include "tools/distoptctl/json_writer.h"

namespace distopt {
namespace distoptctl {

inline constexpr int kExitOk = 0;
// A call to a worker failed (each failure is a line on stderr).
inline constexpr int kExitFailed = 1;
// The command line was wrong (what is wrong is a line on stderr).
inline constexpr int kExitUsage = 2;

struct Invocation {
  // Thread-safe, shared by a command's calls.
  Client* client = nullptr;
  // --json: one JSON document instead of tables.
  bool json = false;
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
};

// The status's message on one line, without the client library's
// "worker ADDRESS: " (the address is said before it).
std::string OneLineMessage(absl::string_view address,
                           const absl::Status& status);

// Prints the failure line of `status`, a call to `address`, on stderr.
void ReportFailure(const Invocation& invocation, absl::string_view address,
                   const absl::Status& status);

// Writes "error": {"code": "UNAVAILABLE", "message": "..."} into the
// object being written.
void WriteJsonError(JsonWriter& json, absl::string_view address,
                    const absl::Status& status);

// How a command on one worker ends: `result`, of a call to `address`,
// printed as the JSON document {"address": ..., fields `write_json`
// writes} or as the text `render` makes of it; or its failure reported.
template <typename T, typename WriteJson, typename Render>
int PrintResult(const Invocation& invocation, const std::string& address,
                const absl::StatusOr<T>& result, WriteJson write_json,
                Render render) {
  if (!result.ok()) {
    ReportFailure(invocation, address, result.status());
    return kExitFailed;
  }
  if (invocation.json) {
    JsonWriter json;
    json.BeginObject().Field("address", address);
    write_json(json, *result);
    json.EndObject();
    *invocation.out << json.text() << "\n";
  } else {
    *invocation.out << render(*result);
  }
  return kExitOk;
}

// Runs `call` for every address at once and returns the results in the
// addresses' order.
template <typename Result>
std::vector<Result> OnEveryWorker(
    const std::vector<std::string>& addresses,
    const std::function<Result(const std::string& address)>& call) {
  std::vector<Result> results(addresses.size());
  std::vector<std::thread> threads;
  threads.reserve(addresses.size());
  for (size_t i = 0; i < addresses.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = call(addresses[i]); });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

}  // namespace distoptctl
}  // namespace distopt

#endif  // DISTOPT_TOOLS_DISTOPTCTL_INVOCATION_H_
