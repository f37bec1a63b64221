// distopt._distopt.DistributedOptimizer: one optimizer per owning worker,
// stepped together (client/distributed_optimizer.h).
#include <memory>
#include <string>
#include <vector>

#include "client/distributed_optimizer.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/bindings.h"
#include "python/src/hyperparameters.h"
#include "python/src/status.h"

namespace distopt {
namespace python {
namespace py = pybind11;

void BindOptimizers(py::module_& m) {
  py::class_<DistributedOptimizer>(m, "DistributedOptimizer")
      .def(py::init([](Client* client, const std::string& kind,
                       const std::vector<std::pair<std::string, uint64_t>>&
                           parameters,
                       const py::dict& hyperparameters) {
             std::vector<RemoteParameter> remote;
             remote.reserve(parameters.size());
             for (const auto& [worker, id] : parameters) {
               remote.push_back({worker, id});
             }
             const HyperparameterMap map = ToHyperparameters(hyperparameters);
             py::gil_scoped_release release;
             return ValueOrThrow(
                 DistributedOptimizer::Create(client, kind, remote, map));
           }),
           // The optimizer's calls go through the client: keep it alive.
           py::keep_alive<1, 2>())
      .def("step",
           [](DistributedOptimizer& optimizer, uint64_t context_id) {
             py::gil_scoped_release release;
             ThrowIfError(optimizer.Step(context_id));
           })
      .def("set_hyperparameters",
           [](DistributedOptimizer& optimizer, const py::dict& changes) {
             const HyperparameterMap map = ToHyperparameters(changes);
             py::gil_scoped_release release;
             ThrowIfError(optimizer.SetHyperparameters(map));
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
           [](DistributedOptimizer& optimizer, Client* client) {
             std::vector<std::string> serialized;
             {
               py::gil_scoped_release release;
               for (const auto& owner : optimizer.owners()) {
                 serialized.push_back(
                     ValueOrThrow(
                         client->GetStateDict(owner.worker, owner.optimizer_id))
                         .SerializeAsString());
               }
             }
             py::list result;
             for (const std::string& bytes : serialized) {
               result.append(py::bytes(bytes));
             }
             return result;
           })
      .def("load_state_dicts", [](DistributedOptimizer& optimizer,
                                  Client* client,
                                  const std::vector<std::string>& serialized) {
        if (serialized.size() != optimizer.owners().size()) {
          throw py::value_error(
              "state_dict: " + std::to_string(serialized.size()) +
              " owners' states; expected " +
              std::to_string(optimizer.owners().size()));
        }
        std::vector<v1::OptimizerStateDict> dicts(serialized.size());
        for (size_t i = 0; i < serialized.size(); ++i) {
          if (!dicts[i].ParseFromString(serialized[i])) {
            throw py::value_error("state_dict: owner " + std::to_string(i) +
                                  "'s state does not parse");
          }
        }
        py::gil_scoped_release release;
        for (size_t i = 0; i < dicts.size(); ++i) {
          const auto& owner = optimizer.owners()[i];
          ThrowIfError(client->LoadStateDict(owner.worker, owner.optimizer_id,
                                             dicts[i]));
        }
      });
}

}  // namespace python
}  // namespace distopt
