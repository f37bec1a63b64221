// How a new parameter gets its first values.
#ifndef DISTOPT_SERVER_PARAMS_INITIALIZER_H_
#define DISTOPT_SERVER_PARAMS_INITIALIZER_H_

#include <cstdint>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/backend.h"
#include "common/tensor.h"

namespace distopt {

struct ZerosInit {};
struct ConstantInit {
  double value = 0;
};
// Uniform in [low, high), as torch.nn.init.uniform_.
struct UniformInit {
  double low = 0;
  double high = 1;
  uint64_t seed = 0;
};
// Normal(mean, stddev), as torch.nn.init.normal_.
struct NormalInit {
  double mean = 0;
  double stddev = 1;
  uint64_t seed = 0;
};
// Raw little-endian bytes of the parameter's dtype; not owned, must outlive
// the call that uses it.
struct ValuesInit {
  absl::string_view bytes;
};

using Initializer =
    std::variant<ZerosInit, ConstantInit, UniformInit, NormalInit, ValuesInit>;

// Checks `init` for a tensor of `dtype` with `byte_size` bytes. Errors are
// INVALID_ARGUMENT naming the field under "initializer".
absl::Status ValidateInitializer(const Initializer& init, DType dtype,
                                 size_t byte_size);

// Writes the initial values into `tensor` (on `backend`'s device). Random
// initializers are deterministic: the same seed gives the same values on
// every machine, whatever the device.
absl::Status ApplyInitializer(const Initializer& init, Backend& backend,
                              Tensor& tensor);

}  // namespace distopt

#endif  // DISTOPT_SERVER_PARAMS_INITIALIZER_H_
