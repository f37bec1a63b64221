// distopt._distopt: the C++ client library for Python. The pure-Python
// layer in python/distopt/ is the public API; this module is its engine.
#include "pybind11/pybind11.h"
#include "python/src/bindings.h"
#include "python/src/interruptible.h"
#include "python/src/status.h"

PYBIND11_MODULE(_distopt, m) {
  m.doc() = "distopt's C++ client library (use the distopt package).";
  distopt::python::RegisterStatusTranslator();
  distopt::python::RememberMainThread();
  distopt::python::BindClient(m);
  distopt::python::BindOptimizers(m);
  distopt::python::BindDataParallel(m);
}
