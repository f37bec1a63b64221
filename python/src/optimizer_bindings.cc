// distopt._distopt.DistributedOptimizer: one optimizer per owning worker,
// stepped together (client/distributed_optimizer.h).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/distributed_optimizer.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/bindings.h"
#include "python/src/hyperparameters.h"
#include "python/src/interruptible.h"
#include "python/src/status.h"

namespace distopt {
namespace python {
namespace py = pybind11;

void BindOptimizers(py::module_& m) {
  py::class_<DistributedOptimizer>(m, "DistributedOptimizer")
      .def(py::init([](py::object client_object, std::string kind,
                       const std::vector<std::pair<std::string, uint64_t>>&
                           parameters,
                       const py::dict& hyperparameters) {
             Client* client = ClientArgument(client_object);
             std::vector<RemoteParameter> remote;
             remote.reserve(parameters.size());
             for (const auto& [worker, id] : parameters) {
               remote.push_back({worker, id});
             }
             const HyperparameterMap map = ToHyperparameters(hyperparameters);
             return ValueOrThrow(Blocking(
                 [client, kind, remote, map] {
                   return DistributedOptimizer::Create(client, kind, remote,
                                                       map);
                 },
                 client_object));
           }),
           // The optimizer's calls go through the client: keep it alive.
           py::keep_alive<1, 2>())
      .def(
          "step",
          [](py::object self, uint64_t context_id) {
            auto* optimizer = self.cast<DistributedOptimizer*>();
            ThrowIfError(Blocking(
                [optimizer, context_id] { return optimizer->Step(context_id); },
                self));
          })
      .def(
          "set_hyperparameters",
          [](py::object self, const py::dict& changes) {
            auto* optimizer = self.cast<DistributedOptimizer*>();
            const HyperparameterMap map = ToHyperparameters(changes);
            ThrowIfError(Blocking(
                [optimizer, map] { return optimizer->SetHyperparameters(map); },
                self));
          })
      .def("owners",
           [](const DistributedOptimizer& optimizer) {
             py::list owners;
             for (const auto& owner : optimizer.owners()) {
               owners.append(py::make_tuple(owner.worker, owner.optimizer_id,
                                            owner.parameter_ids));
             }
             return owners;
           })
      // Each owner's state dict, serialized (distopt.v1.OptimizerStateDict).
      .def("state_dicts",
           [](py::object self, py::object client_object) {
             auto* optimizer = self.cast<DistributedOptimizer*>();
             Client* client = ClientArgument(client_object);
             std::vector<std::string> serialized = ValueOrThrow(Blocking(
                 [optimizer,
                  client]() -> absl::StatusOr<std::vector<std::string>> {
                   std::vector<std::string> dicts;
                   for (const auto& owner : optimizer->owners()) {
                     absl::StatusOr<v1::OptimizerStateDict> dict =
                         client->GetStateDict(owner.worker, owner.optimizer_id);
                     if (!dict.ok()) return dict.status();
                     dicts.push_back(dict->SerializeAsString());
                   }
                   return dicts;
                 },
                 py::make_tuple(self, client_object)));
             py::list result;
             for (const std::string& bytes : serialized) {
               result.append(py::bytes(bytes));
             }
             return result;
           })
      // All or nothing per owner, owner by owner.
      .def("load_state_dicts", [](py::object self, py::object client_object,
                                  const std::vector<std::string>& serialized) {
        auto* optimizer = self.cast<DistributedOptimizer*>();
        Client* client = ClientArgument(client_object);
        if (serialized.size() != optimizer->owners().size()) {
          throw py::value_error(
              "state_dict: " + std::to_string(serialized.size()) +
              " owners' states; expected " +
              std::to_string(optimizer->owners().size()));
        }
        std::vector<v1::OptimizerStateDict> dicts(serialized.size());
        for (size_t i = 0; i < serialized.size(); ++i) {
          if (!dicts[i].ParseFromString(serialized[i])) {
            throw py::value_error("state_dict: owner " + std::to_string(i) +
                                  "'s state does not parse");
          }
        }
        ThrowIfError(Blocking(
            [optimizer, client, dicts]() -> absl::Status {
              std::vector<std::string> applied;
              for (size_t i = 0; i < dicts.size(); ++i) {
                const auto& owner = optimizer->owners()[i];
                absl::Status loaded = client->LoadStateDict(
                    owner.worker, owner.optimizer_id, dicts[i]);
                if (!loaded.ok()) {
                  // The owners before it did load theirs: say so, as a
                  // failed step does (distopt.Error.applied).
                  return absl::Status(
                      loaded.code(),
                      absl::StrCat(
                          loaded.message(),
                          applied.empty()
                              ? ""
                              : "; the owners before it loaded theirs, so "
                                "the optimizer mixes two states until a "
                                "state dict is loaded again",
                          ". Applied on: ",
                          applied.empty() ? "none"
                                          : absl::StrJoin(applied, ", "),
                          "."));
                }
                applied.push_back(owner.worker);
              }
              return absl::OkStatus();
            },
            py::make_tuple(self, client_object)));
      });
}

}  // namespace python
}  // namespace distopt
