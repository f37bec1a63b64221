// distopt._distopt.RemoteZero and RemoteLocalSgd: a rank's handles on its
// daemon's data-parallel optimizers (client/data_parallel.h). Requests and
// infos cross as JSON of their protocol buffer messages; state dicts as
// serialized messages.
#include <cstdint>
#include <string>

#include "client/data_parallel.h"
#include "pybind11/pybind11.h"
#include "python/src/bindings.h"
#include "python/src/hyperparameters.h"
#include "python/src/proto_json.h"
#include "python/src/status.h"

namespace distopt {
namespace python {
namespace py = pybind11;

namespace {

// Runs `call` without the GIL and returns its message as JSON.
template <typename Call>
std::string JsonOf(Call call) {
  std::string json;
  {
    py::gil_scoped_release release;
    json = ToJson(ValueOrThrow(call()));
  }
  return json;
}

template <typename Message>
Message Parse(const py::bytes& bytes, const char* argument) {
  Message message;
  if (!message.ParseFromString(std::string(bytes))) {
    throw py::value_error(std::string(argument) + ": does not parse as " +
                          Message::descriptor()->full_name());
  }
  return message;
}

}  // namespace

void BindDataParallel(py::module_& m) {
  py::class_<RemoteZero>(m, "RemoteZero")
      .def(py::init<Client*, std::string>(), py::keep_alive<1, 2>())
      .def("create",
           [](RemoteZero& zero, const std::string& request_json) {
             v1::CreateZeroRequest request;
             ParseJson(request_json, "request", &request);
             return JsonOf([&] { return zero.Create(request); });
           })
      .def("step",
           [](RemoteZero& zero, uint64_t context_id) {
             py::gil_scoped_release release;
             ThrowIfError(zero.Step(context_id));
           })
      .def("join",
           [](RemoteZero& zero, double wait_s) {
             py::gil_scoped_release release;
             return ValueOrThrow(zero.Join(absl::Seconds(wait_s)));
           })
      .def("add_param_group",
           [](RemoteZero& zero, const std::string& group_json) {
             v1::ZeroParamGroup group;
             ParseJson(group_json, "param_group", &group);
             return JsonOf([&] { return zero.AddParamGroup(group); });
           })
      .def("set_hyperparameters",
           [](RemoteZero& zero, int group, const py::dict& changes) {
             const HyperparameterMap map = ToHyperparameters(changes);
             return JsonOf([&] { return zero.SetHyperparameters(group, map); });
           })
      .def("consolidate_state_dict",
           [](RemoteZero& zero, int to) {
             py::gil_scoped_release release;
             return ValueOrThrow(zero.ConsolidateStateDict(to));
           })
      .def("state_dict",
           [](RemoteZero& zero) {
             std::string bytes;
             {
               py::gil_scoped_release release;
               bytes = ValueOrThrow(zero.GetStateDict()).SerializeAsString();
             }
             return py::bytes(bytes);
           })
      .def("load_state_dict",
           [](RemoteZero& zero, const py::bytes& bytes) {
             const auto dict = Parse<v1::ZeroStateDict>(bytes, "state_dict");
             py::gil_scoped_release release;
             ThrowIfError(zero.LoadStateDict(dict));
           })
      .def("info",
           [](RemoteZero& zero) { return JsonOf([&] { return zero.Get(); }); });

  py::class_<RemoteLocalSgd>(m, "RemoteLocalSgd")
      .def(py::init<Client*, std::string>(), py::keep_alive<1, 2>())
      .def("create",
           [](RemoteLocalSgd& local_sgd, const std::string& request_json) {
             v1::CreatePostLocalSgdRequest request;
             ParseJson(request_json, "request", &request);
             return JsonOf([&] { return local_sgd.Create(request); });
           })
      .def("step",
           [](RemoteLocalSgd& local_sgd, uint64_t context_id) {
             py::gil_scoped_release release;
             return ValueOrThrow(local_sgd.Step(context_id));
           })
      .def("set_hyperparameters",
           [](RemoteLocalSgd& local_sgd, int group, const py::dict& changes) {
             const HyperparameterMap map = ToHyperparameters(changes);
             return JsonOf(
                 [&] { return local_sgd.SetHyperparameters(group, map); });
           })
      .def("state_dict",
           [](RemoteLocalSgd& local_sgd) {
             std::string bytes;
             {
               py::gil_scoped_release release;
               bytes =
                   ValueOrThrow(local_sgd.GetStateDict()).SerializeAsString();
             }
             return py::bytes(bytes);
           })
      .def("load_state_dict",
           [](RemoteLocalSgd& local_sgd, const py::bytes& bytes) {
             const auto dict =
                 Parse<v1::PostLocalSgdStateDict>(bytes, "state_dict");
             py::gil_scoped_release release;
             return ValueOrThrow(local_sgd.LoadStateDict(dict));
           })
      .def("info", [](RemoteLocalSgd& local_sgd) {
        return JsonOf([&] { return local_sgd.Get(); });
      });
}

}  // namespace python
}  // namespace distopt
