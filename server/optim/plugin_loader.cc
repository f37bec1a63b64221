#include "server/optim/plugin_loader.h"

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/optim/plugin_api.h"

namespace distopt {
namespace {

class RegistrySink : public OptimizerKindSink {
 public:
  explicit RegistrySink(OptimizerRegistry& registry) : registry_(registry) {}

  bool Add(const std::string& name,
           std::unique_ptr<OptimizerKind> kind) override {
    const bool added =
        kind != nullptr && registry_.Register(name, std::move(kind));
    (added ? result.added : result.rejected).push_back(name);
    return added;
  }

  PluginLoadResult result;

 private:
  OptimizerRegistry& registry_;
};

}  // namespace

absl::StatusOr<PluginLoadResult> LoadOptimizerPlugin(
    const std::string& path, OptimizerRegistry& registry) {
  // Never closed: the kinds' code lives in the library.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--optimizer_plugin=", path, ": cannot load it: ", dlerror()));
  }
  auto entry = reinterpret_cast<DistoptRegisterOptimizerKindsFunction>(
      dlsym(handle, DISTOPT_OPTIMIZER_PLUGIN_ENTRY_POINT));
  if (entry == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--optimizer_plugin=", path, ": no function ",
        DISTOPT_OPTIMIZER_PLUGIN_ENTRY_POINT,
        "; expected a plugin built against server/optim/plugin_api.h"));
  }
  RegistrySink sink(registry);
  entry(&sink);
  if (sink.result.added.empty() && sink.result.rejected.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer_plugin=", path,
                     ": registered no optimizer kind; expected at least one"));
  }
  return sink.result;
}

}  // namespace distopt
