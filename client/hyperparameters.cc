#include "client/hyperparameters.h"

namespace distopt {
namespace hyper {

v1::HyperparameterValue Number(double value) {
  v1::HyperparameterValue proto;
  proto.set_number(value);
  return proto;
}

v1::HyperparameterValue Flag(bool value) {
  v1::HyperparameterValue proto;
  proto.set_flag(value);
  return proto;
}

v1::HyperparameterValue Pair(double first, double second) {
  v1::HyperparameterValue proto;
  proto.mutable_pair()->set_first(first);
  proto.mutable_pair()->set_second(second);
  return proto;
}

}  // namespace hyper
}  // namespace distopt
