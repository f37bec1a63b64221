// distopt._distopt.RemoteZero and RemoteLocalSgd: a rank's handles on its
// daemon's data-parallel optimizers (client/data_parallel.h). Requests and
// infos cross as JSON of their protocol buffer messages; state dicts as
// serialized messages. Every call may wait for the other ranks, so each is
// interruptible (interruptible.h).
#include <cstdint>
#include <string>

#include "client/data_parallel.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/bindings.h"
#include "python/src/hyperparameters.h"
#include "python/src/interruptible.h"
#include "python/src/proto_json.h"
#include "python/src/status.h"

namespace distopt {
namespace python {
namespace py = pybind11;

namespace {

template <typename Message>
Message Parse(const py::bytes& bytes, const char* argument) {
  Message message;
  if (!message.ParseFromString(std::string(bytes))) {
    throw py::value_error(std::string(argument) + ": does not parse as " +
                          Message::descriptor()->full_name());
  }
  return message;
}

template <typename Message>
Message ParsedJson(const std::string& json, const char* argument) {
  Message message;
  ParseJson(json, argument, &message);
  return message;
}

// A parameter group as torch writes one, {"params": [names], **hyper}.
v1::ZeroParamGroup GroupOf(const py::dict& group, const std::string& argument) {
  v1::ZeroParamGroup proto;
  py::dict hyperparameters;
  for (const auto& [key, value] : group) {
    const std::string name = py::str(key);
    if (name != "params") {
      hyperparameters[key] = value;
      continue;
    }
    if (py::isinstance<py::str>(value) ||
        !py::isinstance<py::sequence>(value)) {
      throw py::type_error(argument +
                           "['params']: expected a list of the "
                           "daemon's parameter names");
    }
    for (const py::handle& parameter : value) {
      if (!py::isinstance<py::str>(parameter)) {
        throw py::type_error(argument +
                             "['params']: " + std::string(py::repr(parameter)) +
                             "; expected parameter names (str)");
      }
      proto.add_parameter_names(parameter.cast<std::string>());
    }
  }
  if (proto.parameter_names().empty()) {
    throw py::value_error(argument +
                          "['params']: empty or missing; expected the "
                          "daemon's parameter names (the same on every rank)");
  }
  for (const auto& [name, value] : ToHyperparameters(hyperparameters)) {
    (*proto.mutable_hyperparameters())[name] = value;
  }
  return proto;
}

// The request from its JSON (every field but the groups) and the groups.
template <typename Request>
Request RequestOf(const std::string& json, const py::list& groups) {
  Request request = ParsedJson<Request>(json, "request");
  for (size_t g = 0; g < groups.size(); ++g) {
    *request.add_groups() = GroupOf(groups[g].cast<py::dict>(),
                                    "param_groups[" + std::to_string(g) + "]");
  }
  return request;
}

// `call(handle)` on the handle `self` wraps, interruptibly; `self` (which
// keeps the client alive) stays alive while the call runs.
template <typename Handle, typename Call>
auto OnHandle(const py::object& self, Call call) {
  Handle* handle = self.cast<Handle*>();
  return Blocking([handle, call] { return call(*handle); }, self);
}

// The same, for calls that return a message: its JSON.
template <typename Handle, typename Call>
std::string JsonOn(const py::object& self, Call call) {
  return ToJson(ValueOrThrow(OnHandle<Handle>(self, call)));
}

}  // namespace

void BindDataParallel(py::module_& m) {
  py::class_<RemoteZero>(m, "RemoteZero")
      .def(py::init([](const py::object& client, std::string worker) {
             return std::make_unique<RemoteZero>(ClientArgument(client),
                                                 std::move(worker));
           }),
           py::keep_alive<1, 2>())
      .def(
          "create",
          [](py::object self, const std::string& json, const py::list& groups) {
            auto request = RequestOf<v1::CreateZeroRequest>(json, groups);
            return JsonOn<RemoteZero>(self, [request](RemoteZero& zero) {
              return zero.Create(request);
            });
          })
      .def("step",
           [](py::object self, uint64_t context_id) {
             ThrowIfError(
                 OnHandle<RemoteZero>(self, [context_id](RemoteZero& zero) {
                   return zero.Step(context_id);
                 }));
           })
      .def("join",
           [](py::object self, double wait_s) {
             return ValueOrThrow(
                 OnHandle<RemoteZero>(self, [wait_s](RemoteZero& zero) {
                   return zero.Join(absl::Seconds(wait_s));
                 }));
           })
      .def("add_param_group",
           [](py::object self, const py::dict& param_group) {
             auto group = GroupOf(param_group, "param_group");
             return JsonOn<RemoteZero>(self, [group](RemoteZero& zero) {
               return zero.AddParamGroup(group);
             });
           })
      .def("set_hyperparameters",
           [](py::object self, int group, const py::dict& changes) {
             const HyperparameterMap map = ToHyperparameters(changes);
             return JsonOn<RemoteZero>(self, [group, map](RemoteZero& zero) {
               return zero.SetHyperparameters(group, map);
             });
           })
      .def("consolidate_state_dict",
           [](py::object self, int to) {
             return ValueOrThrow(
                 OnHandle<RemoteZero>(self, [to](RemoteZero& zero) {
                   return zero.ConsolidateStateDict(to);
                 }));
           })
      .def("state_dict",
           [](py::object self) {
             return py::bytes(
                 ValueOrThrow(OnHandle<RemoteZero>(self, [](RemoteZero& zero) {
                   return zero.GetStateDict();
                 })).SerializeAsString());
           })
      .def("load_state_dict",
           [](py::object self, const py::bytes& bytes) {
             auto dict = Parse<v1::ZeroStateDict>(bytes, "state_dict");
             ThrowIfError(OnHandle<RemoteZero>(self, [dict](RemoteZero& zero) {
               return zero.LoadStateDict(dict);
             }));
           })
      .def("info", [](py::object self) {
        return JsonOn<RemoteZero>(self,
                                  [](RemoteZero& zero) { return zero.Get(); });
      });

  py::class_<RemoteLocalSgd>(m, "RemoteLocalSgd")
      .def(py::init([](const py::object& client, std::string worker) {
             return std::make_unique<RemoteLocalSgd>(ClientArgument(client),
                                                     std::move(worker));
           }),
           py::keep_alive<1, 2>())
      .def(
          "create",
          [](py::object self, const std::string& json, const py::list& groups) {
            auto request =
                RequestOf<v1::CreatePostLocalSgdRequest>(json, groups);
            return JsonOn<RemoteLocalSgd>(self,
                                          [request](RemoteLocalSgd& local_sgd) {
                                            return local_sgd.Create(request);
                                          });
          })
      .def("step",
           [](py::object self, uint64_t context_id) {
             return ValueOrThrow(OnHandle<RemoteLocalSgd>(
                 self, [context_id](RemoteLocalSgd& local_sgd) {
                   return local_sgd.Step(context_id);
                 }));
           })
      .def("set_hyperparameters",
           [](py::object self, int group, const py::dict& changes) {
             const HyperparameterMap map = ToHyperparameters(changes);
             return JsonOn<RemoteLocalSgd>(
                 self, [group, map](RemoteLocalSgd& local_sgd) {
                   return local_sgd.SetHyperparameters(group, map);
                 });
           })
      .def("state_dict",
           [](py::object self) {
             return py::bytes(
                 ValueOrThrow(OnHandle<RemoteLocalSgd>(self, [](RemoteLocalSgd&
                                                                    local_sgd) {
                   return local_sgd.GetStateDict();
                 })).SerializeAsString());
           })
      .def("load_state_dict",
           [](py::object self, const py::bytes& bytes) {
             auto dict = Parse<v1::PostLocalSgdStateDict>(bytes, "state_dict");
             return ValueOrThrow(OnHandle<RemoteLocalSgd>(
                 self, [dict](RemoteLocalSgd& local_sgd) {
                   return local_sgd.LoadStateDict(dict);
                 }));
           })
      .def("info", [](py::object self) {
        return JsonOn<RemoteLocalSgd>(
            self, [](RemoteLocalSgd& local_sgd) { return local_sgd.Get(); });
      });
}

}  // namespace python
}  // namespace distopt
