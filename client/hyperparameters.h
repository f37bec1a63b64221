// Hyperparameter values for the client's optimizer calls.
#ifndef DISTOPT_CLIENT_HYPERPARAMETERS_H_
#define DISTOPT_CLIENT_HYPERPARAMETERS_H_

#include <map>
#include <string>

#include "proto/distopt/v1/optimizer.pb.h"

namespace distopt {

// By name, e.g. {{"lr", hyper::Number(1e-3)}, {"betas", hyper::Pair(0.9,
// 0.99)}}.
using HyperparameterMap = std::map<std::string, v1::HyperparameterValue>;

namespace hyper {

v1::HyperparameterValue Number(double value);
v1::HyperparameterValue Flag(bool value);
v1::HyperparameterValue Pair(double first, double second);

}  // namespace hyper
}  // namespace distopt

#endif  // DISTOPT_CLIENT_HYPERPARAMETERS_H_
