// distopt._distopt.Client: the client library's Client, parameters and
// distributed autograd calls. Every call that talks to a worker releases
// the GIL while it waits, and Ctrl-C interrupts it (interruptible.h).
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/initializers.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/bindings.h"
#include "python/src/interruptible.h"
#include "python/src/proto_json.h"
#include "python/src/status.h"
#include "python/src/tensors.h"

namespace distopt {
namespace python {
namespace py = pybind11;

namespace {

// A buffer and the name of its dtype, as the Python layer passes tensors.
using TensorArg = std::pair<py::buffer, std::string>;

std::vector<Tensor> BorrowAll(BorrowedTensors& borrowed,
                              const std::vector<TensorArg>& args,
                              const std::string& argument) {
  std::vector<Tensor> tensors;
  tensors.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    tensors.push_back(
        borrowed.Borrow(args[i].first, args[i].second,
                        argument + "[" + std::to_string(i) + "]"));
  }
  return tensors;
}

py::dict InfoDict(const ParameterInfo& info) {
  py::dict dict;
  dict["id"] = info.id;
  dict["name"] = info.name;
  dict["dtype"] = std::string(DTypeName(info.dtype));
  dict["shape"] = py::tuple(py::cast(info.shape));
  dict["device"] = info.device.ToString();
  dict["version"] = info.version;
  return dict;
}

// ("zeros",), ("constant", value), ("uniform", low, high, seed) or
// ("normal", mean, std, seed).
v1::Initializer InitializerOf(const py::tuple& spec) {
  const std::string kind = spec.empty() ? "" : std::string(py::str(spec[0]));
  if (kind == "zeros" && spec.size() == 1) return init::Zeros();
  if (kind == "constant" && spec.size() == 2) {
    return init::Constant(spec[1].cast<double>());
  }
  if (kind == "uniform" && spec.size() == 4) {
    return init::Uniform(spec[1].cast<double>(), spec[2].cast<double>(),
                         spec[3].cast<uint64_t>());
  }
  if (kind == "normal" && spec.size() == 4) {
    return init::Normal(spec[1].cast<double>(), spec[2].cast<double>(),
                        spec[3].cast<uint64_t>());
  }
  throw py::value_error(
      "init: " + std::string(py::repr(spec)) +
      "; expected ('zeros',), ('constant', v), ('uniform', low, high, seed) "
      "or ('normal', mean, std, seed)");
}

// InitializerOf, with a seed or value that does not convert (a negative
// seed, a string) refused as the others are.
v1::Initializer ToInitializer(const py::tuple& spec) {
  try {
    return InitializerOf(spec);
  } catch (const py::cast_error&) {
    throw py::value_error("init: " + std::string(py::repr(spec)) +
                          "; expected numbers, and a seed from 0 to 2^64-1");
  }
}

RemoteParameter Ref(const std::string& worker, uint64_t id) {
  return RemoteParameter{worker, id};
}

// call(client) on the Client `self` wraps, interruptibly; `self` and
// `borrowed` (the buffers the call reads) stay alive while it runs.
template <typename Call>
auto OnClient(const py::object& self, Call call,
              py::object borrowed = py::none()) {
  Client* client = self.cast<Client*>();
  return Blocking([client, call] { return call(*client); },
                  py::make_tuple(self, std::move(borrowed)));
}

}  // namespace

Client* ClientArgument(const py::object& client) {
  if (!client.is_none() && py::isinstance<Client>(client)) {
    return client.cast<Client*>();
  }
  throw py::type_error(absl::StrCat(
      "client: ", std::string(py::str(py::type::of(client).attr("__name__"))),
      "; expected a distopt._distopt.Client"));
}

void BindClient(py::module_& m) {
  py::class_<Client>(m, "Client")
      .def(py::init([](double rpc_timeout_s, std::string tls_root_certs,
                       std::string tls_client_cert, std::string tls_client_key,
                       std::string auth_token, int64_t chunk_bytes) {
             ClientOptions options;
             if (!(rpc_timeout_s > 0)) {
               throw py::value_error(
                   "rpc_timeout: " + std::to_string(rpc_timeout_s) +
                   "; expected seconds > 0");
             }
             options.rpc_timeout = absl::Seconds(rpc_timeout_s);
             options.tls_root_certs = std::move(tls_root_certs);
             options.tls_client_cert = std::move(tls_client_cert);
             options.tls_client_key = std::move(tls_client_key);
             options.auth_token = std::move(auth_token);
             if (chunk_bytes > 0) options.chunk_bytes = chunk_bytes;
             return std::make_unique<Client>(std::move(options));
           }),
           py::arg("rpc_timeout") = 30.0, py::arg("tls_root_certs") = "",
           py::arg("tls_client_cert") = "", py::arg("tls_client_key") = "",
           py::arg("auth_token") = "", py::arg("chunk_bytes") = 0)
      // --- Parameters.
      .def("create_parameter",
           [](py::object self, std::string worker, std::string name,
              const std::string& dtype, Shape shape, const py::tuple& init) {
             const DType type = DTypeFromName(dtype, "dtype");
             const v1::Initializer initializer = ToInitializer(init);
             return ValueOrThrow(OnClient(self,
                                          [=](Client& client) {
                                            return client.CreateParameter(
                                                worker, name, type, shape,
                                                initializer);
                                          }))
                 .id;
           })
      .def("create_parameter_from",
           [](py::object self, std::string worker, std::string name,
              const py::buffer& values, const std::string& dtype) {
             BorrowedTensors borrowed;
             const Tensor tensor = borrowed.Borrow(values, dtype, "values");
             return ValueOrThrow(OnClient(
                                     self,
                                     [=](Client& client) {
                                       return client.CreateParameterFrom(
                                           worker, name, tensor);
                                     },
                                     borrowed.keep_alive()))
                 .id;
           })
      .def("get_parameter",
           [](py::object self, std::string worker, uint64_t id) {
             return InfoDict(ValueOrThrow(OnClient(self, [=](Client& client) {
               return client.GetParameter(Ref(worker, id));
             })));
           })
      .def("find_parameter",
           [](py::object self, std::string worker, std::string name) {
             return ValueOrThrow(OnClient(self,
                                          [=](Client& client) {
                                            return client.FindParameter(worker,
                                                                        name);
                                          }))
                 .id;
           })
      .def("read_parameter",
           [](py::object self, std::string worker, uint64_t id) {
             return ToArray(ValueOrThrow(OnClient(self, [=](Client& client) {
               return client.ReadParameter(Ref(worker, id));
             })));
           })
      .def("write_parameter",
           [](py::object self, std::string worker, uint64_t id,
              const py::buffer& values, const std::string& dtype) {
             BorrowedTensors borrowed;
             const Tensor tensor = borrowed.Borrow(values, dtype, "values");
             return ValueOrThrow(OnClient(
                                     self,
                                     [=](Client& client) {
                                       return client.WriteParameter(
                                           Ref(worker, id), tensor);
                                     },
                                     borrowed.keep_alive()))
                 .version;
           })
      .def("delete_parameter",
           [](py::object self, std::string worker, uint64_t id) {
             ValueOrThrow(OnClient(self, [=](Client& client) {
               return client.DeleteParameter(Ref(worker, id));
             }));
           })
      // JSON of each distopt.v1.OptimizerKindInfo the worker runs.
      .def("list_optimizer_kinds",
           [](py::object self, std::string worker) {
             std::vector<std::string> json;
             for (const auto& kind :
                  ValueOrThrow(OnClient(self, [=](Client& client) {
                    return client.ListOptimizerKinds(worker);
                  }))) {
               json.push_back(ToJson(kind));
             }
             return json;
           })
      // --- Checkpoints.
      .def("save_checkpoint",
           [](py::object self, std::string worker) {
             return ToJson(ValueOrThrow(OnClient(self, [=](Client& client) {
               return client.SaveCheckpoint(worker);
             })));
           })
      .def("list_checkpoints",
           [](py::object self, std::string worker) {
             return ToJson(ValueOrThrow(OnClient(self, [=](Client& client) {
               return client.ListCheckpoints(worker);
             })));
           })
      // --- Inspection: JSON of the distopt.v1.GroupInfo of `worker`'s group.
      .def("get_group",
           [](py::object self, std::string worker) {
             return ToJson(ValueOrThrow(OnClient(self, [=](Client& client) {
               return client.GetGroup(worker);
             })));
           })
      // --- Distributed autograd.
      .def("new_context_id", &Client::NewContextId)
      .def("owns_context", &Client::OwnsContext)
      .def("release_context",
           [](py::object self, std::string worker, uint64_t context_id) {
             return ValueOrThrow(OnClient(self, [=](Client& client) {
               return client.ReleaseContext(worker, context_id);
             }));
           })
      .def("forget_context", &Client::ForgetContext)
      .def("forward",
           [](py::object self, std::string worker, uint64_t context_id,
              std::string op, std::vector<uint64_t> parameter_ids,
              const std::vector<TensorArg>& inputs) {
             BorrowedTensors borrowed;
             const std::vector<Tensor> tensors =
                 BorrowAll(borrowed, inputs, "inputs");
             Client::ForwardResult result = ValueOrThrow(OnClient(
                 self,
                 [=](Client& client) {
                   return client.Forward(worker, context_id, op, parameter_ids,
                                         tensors);
                 },
                 borrowed.keep_alive()));
             py::list outputs;
             for (Tensor& output : result.outputs) {
               outputs.append(ToArray(std::move(output)));
             }
             return py::make_tuple(result.forward_id, outputs);
           })
      .def("backward",
           [](py::object self, std::string worker, uint64_t context_id,
              uint64_t forward_id,
              const std::vector<TensorArg>& output_gradients) {
             BorrowedTensors borrowed;
             const std::vector<Tensor> tensors =
                 BorrowAll(borrowed, output_gradients, "output_gradients");
             std::vector<std::optional<Tensor>> gradients =
                 ValueOrThrow(OnClient(
                     self,
                     [=](Client& client) {
                       return client.Backward(worker, context_id, forward_id,
                                              tensors);
                     },
                     borrowed.keep_alive()));
             py::list result;
             for (std::optional<Tensor>& gradient : gradients) {
               if (gradient.has_value()) {
                 result.append(ToArray(*std::move(gradient)));
               } else {
                 result.append(py::none());
               }
             }
             return result;
           })
      .def("accumulate_gradients",
           [](py::object self, std::string worker, uint64_t context_id,
              const std::vector<std::pair<uint64_t, TensorArg>>& gradients) {
             BorrowedTensors borrowed;
             std::vector<std::pair<uint64_t, Tensor>> tensors;
             for (const auto& [id, arg] : gradients) {
               tensors.emplace_back(
                   id,
                   borrowed.Borrow(arg.first, arg.second,
                                   "gradients[" + std::to_string(id) + "]"));
             }
             ThrowIfError(OnClient(
                 self,
                 [=](Client& client) {
                   return client.AccumulateGradients(worker, context_id,
                                                     tensors);
                 },
                 borrowed.keep_alive()));
           })
      .def("get_gradients",
           [](py::object self, std::string worker, uint64_t context_id) {
             std::map<uint64_t, Tensor> gradients =
                 ValueOrThrow(OnClient(self, [=](Client& client) {
                   return client.GetGradients(worker, context_id);
                 }));
             py::dict result;
             for (auto& [id, gradient] : gradients) {
               result[py::int_(id)] = ToArray(std::move(gradient));
             }
             return result;
           });
}

}  // namespace python
}  // namespace distopt
