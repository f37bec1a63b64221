// Hyperparameters from Python: a dict of name -> float, bool or a pair of
// floats (Adam's betas), as torch.optim takes them.
#ifndef DISTOPT_PYTHON_SRC_HYPERPARAMETERS_H_
#define DISTOPT_PYTHON_SRC_HYPERPARAMETERS_H_

#include "client/hyperparameters.h"
#include "pybind11/pybind11.h"

namespace distopt {
namespace python {

// Raises TypeError naming the hyperparameter whose value is none of those.
HyperparameterMap ToHyperparameters(const pybind11::dict& values);

}  // namespace python
}  // namespace distopt

#endif  // DISTOPT_PYTHON_SRC_HYPERPARAMETERS_H_
