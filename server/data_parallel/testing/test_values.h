// Values for tests of the data-parallel optimizers: parameters and
// gradients of any float dtype, chosen so that every sum over ranks is
// exact in float32 in any order, and the average over a power-of-two
// number of ranks too, so a collective result can be compared bit for bit
// with a local reference.
#ifndef DISTOPT_SERVER_DATA_PARALLEL_TESTING_TEST_VALUES_H_
#define DISTOPT_SERVER_DATA_PARALLEL_TESTING_TEST_VALUES_H_

#include <vector>

#include "common/dtype.h"
#include "common/shape.h"
#include "common/tensor.h"

namespace distopt {
namespace data_parallel_testing {

struct ParamSpec {
  Shape shape;
  DType dtype = DType::kFloat32;
};

// Rank r's gradient of parameter (g, i) at step s: multiples of 1/64 small
// enough that every sum over ranks is exact in float32, in any order.
Tensor Gradient(int g, int i, int s, int r, const ParamSpec& spec);
Tensor Initial(int g, int i, const ParamSpec& spec);

// fp32 values as a tensor of spec's dtype (rounded to nearest even), and
// back.
Tensor FromFloats(const std::vector<float>& values, const ParamSpec& spec);
std::vector<float> ToFloats(const Tensor& t);

}  // namespace data_parallel_testing
}  // namespace distopt

#endif  // DISTOPT_SERVER_DATA_PARALLEL_TESTING_TEST_VALUES_H_
