#include "python/src/status.h"

#include <string>

namespace distopt {
namespace python {
namespace py = pybind11;

void RegisterStatusTranslator() {
  py::register_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer) std::rethrow_exception(pointer);
    } catch (const StatusError& error) {
      // The GIL is held here. distopt.errors defines the exception type,
      // so that it can carry Python attributes and be pickled.
      py::object errors = py::module_::import("distopt.errors");
      // absl's code names are gRPC's ("NOT_FOUND", ...).
      py::object instance =
          errors.attr("Error")(static_cast<int>(error.status().code()),
                               absl::StatusCodeToString(error.status().code()),
                               std::string(error.status().message()));
      PyErr_SetObject(errors.attr("Error").ptr(), instance.ptr());
    }
  });
}

}  // namespace python
}  // namespace distopt
