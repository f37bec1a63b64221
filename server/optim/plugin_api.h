// The entry point of an optimizer plugin: a shared library that adds kinds
// to a daemon without rebuilding it.
//
// A plugin includes this header (and optimizer_kind.h), implements one or
// more OptimizerKind classes and defines:
//
//   extern "C" void DistoptRegisterOptimizerKinds(
//       distopt::OptimizerKindSink* sink) {
//     sink->Add("lion", std::make_unique<Lion>());
//   }
//
// and the daemon loads it with --optimizer_plugin=/path/to/plugin.so
// (repeatable) before it starts serving. A name that is already registered
// keeps its kind: Add returns false and the daemon logs it. The plugin is
// never unloaded. It must be built with the same compiler, standard library
// and distopt headers as the daemon (C++ classes cross the boundary), and
// links against nothing of distopt: the symbols it uses (Hyperparameters,
// ...) come from the daemon, which exports them. See
// server/optim/plugins/lion_plugin.cc for a complete example.
#ifndef DISTOPT_SERVER_OPTIM_PLUGIN_API_H_
#define DISTOPT_SERVER_OPTIM_PLUGIN_API_H_

#include <memory>
#include <string>

#include "server/optim/optimizer_kind.h"

namespace distopt {

class OptimizerKindSink {
 public:
  virtual ~OptimizerKindSink() = default;
  // Registers `kind` under `name`; false if the name is taken.
  virtual bool Add(const std::string& name,
                   std::unique_ptr<OptimizerKind> kind) = 0;
};

}  // namespace distopt

// The symbol the daemon looks up in a plugin.
#define DISTOPT_OPTIMIZER_PLUGIN_ENTRY_POINT "DistoptRegisterOptimizerKinds"

extern "C" {
using DistoptRegisterOptimizerKindsFunction =
    void (*)(distopt::OptimizerKindSink* sink);
}

#endif  // DISTOPT_SERVER_OPTIM_PLUGIN_API_H_
