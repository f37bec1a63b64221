#include "python/src/hyperparameters.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace distopt {
namespace python {
namespace py = pybind11;

HyperparameterMap ToHyperparameters(const py::dict& values) {
  HyperparameterMap map;
  for (const auto& [key, value] : values) {
    const std::string name = py::str(key);
    // bool before numbers: True is an int in Python.
    if (py::isinstance<py::bool_>(value)) {
      map[name] = hyper::Flag(value.cast<bool>());
    } else if (py::isinstance<py::float_>(value) ||
               py::isinstance<py::int_>(value)) {
      map[name] = hyper::Number(value.cast<double>());
    } else if ((py::isinstance<py::tuple>(value) ||
                py::isinstance<py::list>(value)) &&
               py::len(value) == 2) {
      py::sequence pair = value.cast<py::sequence>();
      map[name] = hyper::Pair(pair[0].cast<double>(), pair[1].cast<double>());
    } else {
      throw py::type_error(absl::StrCat(
          "hyperparameter ", name, ": ", std::string(py::repr(value)),
          "; expected a float, a bool or a pair of floats"));
    }
  }
  return map;
}

}  // namespace python
}  // namespace distopt
