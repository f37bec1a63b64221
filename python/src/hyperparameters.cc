#include "python/src/hyperparameters.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"

namespace distopt {
namespace python {
namespace py = pybind11;

namespace {

// A number from anything float() takes (a float, an int, a numpy scalar, a
// one-element tensor), or nothing.
std::optional<double> AsNumber(const py::handle& value) {
  if (py::isinstance<py::bool_>(value) || py::isinstance<py::str>(value) ||
      !py::hasattr(value, "__float__")) {
    return std::nullopt;
  }
  try {
    return py::float_(py::reinterpret_borrow<py::object>(value)).cast<double>();
  } catch (const py::error_already_set&) {
    return std::nullopt;
  }
}

}  // namespace

HyperparameterMap ToHyperparameters(const py::dict& values) {
  HyperparameterMap map;
  for (const auto& [key, value] : values) {
    const std::string name = py::str(key);
    // bool before numbers: True is an int in Python.
    if (py::isinstance<py::bool_>(value)) {
      map[name] = hyper::Flag(value.cast<bool>());
      continue;
    }
    if (std::optional<double> number = AsNumber(value)) {
      map[name] = hyper::Number(*number);
      continue;
    }
    if ((py::isinstance<py::tuple>(value) || py::isinstance<py::list>(value)) &&
        py::len(value) == 2) {
      py::sequence pair = value.cast<py::sequence>();
      std::optional<double> first = AsNumber(pair[0]);
      std::optional<double> second = AsNumber(pair[1]);
      if (first && second) {
        map[name] = hyper::Pair(*first, *second);
        continue;
      }
    }
    throw py::type_error(absl::StrCat(
        "hyperparameter ", name, ": ", std::string(py::repr(value)),
        "; expected a float, a bool or a pair of floats"));
  }
  return map;
}

}  // namespace python
}  // namespace distopt
