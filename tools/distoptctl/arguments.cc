#include "tools/distoptctl/arguments.h"

#include <algorithm>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace distopt {
namespace distoptctl {
namespace {

// The flag named `name` if it is one of `flags`.
absl::CommandLineFlag* Known(absl::string_view name,
                             absl::Span<const absl::string_view> flags) {
  if (std::find(flags.begin(), flags.end(), name) == flags.end()) {
    return nullptr;
  }
  return absl::FindCommandLineFlag(name);
}

}  // namespace

absl::StatusOr<Arguments> ParseArguments(
    int argc, const char* const* argv,
    absl::Span<const absl::string_view> flags) {
  Arguments arguments;
  bool flags_ended = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view argument = argv[i];
    if (flags_ended || argument.size() < 2 || argument[0] != '-') {
      arguments.positional.emplace_back(argument);
      continue;
    }
    if (argument == "--") {
      flags_ended = true;
      continue;
    }
    absl::string_view name = argument.substr(argument[1] == '-' ? 2 : 1);
    absl::string_view value;
    const size_t equals = name.find('=');
    const bool has_value = equals != absl::string_view::npos;
    if (has_value) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
    }
    if (name == "help" || name == "h") {
      arguments.help = true;
      continue;
    }
    absl::CommandLineFlag* flag = Known(name, flags);
    std::string parsed_value(value);
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      // --noflag for a bool flag.
      flag = Known(name.substr(2), flags);
      if (flag != nullptr && flag->IsOfType<bool>()) {
        name = name.substr(2);
        parsed_value = "false";
      } else {
        flag = nullptr;
      }
    } else if (flag != nullptr && !has_value) {
      if (flag->IsOfType<bool>()) {
        parsed_value = "true";
      } else if (i + 1 < argc) {
        parsed_value = argv[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(argument, ": missing its value"));
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(argument, ": unknown flag"));
    }
    std::string error;
    if (!flag->ParseFrom(parsed_value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", parsed_value, ": ", error));
    }
    arguments.flags_set.emplace(name);
  }
  return arguments;
}

}  // namespace distoptctl
}  // namespace distopt
