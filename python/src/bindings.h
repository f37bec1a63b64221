// The parts of the distopt._distopt extension module, one file each.
#ifndef DISTOPT_PYTHON_SRC_BINDINGS_H_
#define DISTOPT_PYTHON_SRC_BINDINGS_H_

#include "client/client.h"
#include "pybind11/pybind11.h"

namespace distopt {
namespace python {

// Client: parameters and distributed autograd (client_bindings.cc).
void BindClient(pybind11::module_& m);
// The Client a `client` argument wraps; TypeError for None or another type.
Client* ClientArgument(const pybind11::object& client);
// DistributedOptimizer (optimizer_bindings.cc).
void BindOptimizers(pybind11::module_& m);
// RemoteZero and RemoteLocalSgd (data_parallel_bindings.cc).
void BindDataParallel(pybind11::module_& m);

}  // namespace python
}  // namespace distopt

#endif  // DISTOPT_PYTHON_SRC_BINDINGS_H_
