// Initializers for Client::CreateParameter, as in torch.nn.init.
#ifndef DISTOPT_CLIENT_INITIALIZERS_H_
#define DISTOPT_CLIENT_INITIALIZERS_H_

#include <cstdint>

#include "proto/distopt/v1/parameter.pb.h"

namespace distopt {
namespace init {

v1::Initializer Zeros();
v1::Initializer Constant(double value);
// Uniform in [low, high); the same seed gives the same values.
v1::Initializer Uniform(double low, double high, uint64_t seed);
v1::Initializer Normal(double mean, double stddev, uint64_t seed);

}  // namespace init
}  // namespace distopt

#endif  // DISTOPT_CLIENT_INITIALIZERS_H_
