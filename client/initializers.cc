#include "client/initializers.h"

namespace distopt {
namespace init {

v1::Initializer Zeros() {
  v1::Initializer init;
  init.mutable_zeros();
  return init;
}

v1::Initializer Constant(double value) {
  v1::Initializer init;
  init.mutable_constant()->set_value(value);
  return init;
}

v1::Initializer Uniform(double low, double high, uint64_t seed) {
  v1::Initializer init;
  init.mutable_uniform()->set_low(low);
  init.mutable_uniform()->set_high(high);
  init.mutable_uniform()->set_seed(seed);
  return init;
}

v1::Initializer Normal(double mean, double stddev, uint64_t seed) {
  v1::Initializer init;
  init.mutable_normal()->set_mean(mean);
  init.mutable_normal()->set_stddev(stddev);
  init.mutable_normal()->set_seed(seed);
  return init;
}

}  // namespace init
}  // namespace distopt
