// The command line of distoptctl: absl flags anywhere among the command and
// its operands, parsed here rather than by absl::ParseCommandLine, which
// exits with code 1 on a bad flag; distoptctl keeps 1 for failed calls and
// exits with 2 on usage errors.
//
// Accepted forms, as absl's: --flag=value, --flag value, -flag=value; for
// a bool flag also --flag and --noflag. "--" ends the flags.
#ifndef DISTOPT_TOOLS_DISTOPTCTL_ARGUMENTS_H_
#define DISTOPT_TOOLS_DISTOPTCTL_ARGUMENTS_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace distopt {
namespace distoptctl {

struct Arguments {
  // The command, then its operands.
  std::vector<std::string> positional;
  // The flags given (names).
  std::set<std::string> flags_set;
  // --help (or -h) was given.
  bool help = false;
};

// Parses argv[1..], setting the absl flags named in `flags` (the only ones
// accepted). INVALID_ARGUMENT naming the argument for an unknown flag, a
// value the flag does not take, or a flag without its value.
absl::StatusOr<Arguments> ParseArguments(
    int argc, const char* const* argv,
    absl::Span<const absl::string_view> flags);

}  // namespace distoptctl
}  // namespace distopt

#endif  // DISTOPT_TOOLS_DISTOPTCTL_ARGUMENTS_H_
