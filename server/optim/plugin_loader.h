// Loads optimizer plugins (see plugin_api.h) into a registry.
#ifndef DISTOPT_SERVER_OPTIM_PLUGIN_LOADER_H_
#define DISTOPT_SERVER_OPTIM_PLUGIN_LOADER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/optim/registry.h"

namespace distopt {

struct PluginLoadResult {
  std::vector<std::string> added;     // Kinds the plugin registered.
  std::vector<std::string> rejected;  // Names that were already taken.
};

// Opens the shared library at `path` and lets it register its kinds.
// INVALID_ARGUMENT naming --optimizer_plugin when the library cannot be
// opened, lacks the entry point, or registers nothing.
absl::StatusOr<PluginLoadResult> LoadOptimizerPlugin(
    const std::string& path, OptimizerRegistry& registry);

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_PLUGIN_LOADER_H_
