// ParameterInfo: a snapshot of one parameter's metadata, as the daemon keeps
// it and as the client receives it.
#ifndef DISTOPT_COMMON_PARAMETER_INFO_H_
#define DISTOPT_COMMON_PARAMETER_INFO_H_

#include <cstdint>
#include <string>

#include "common/device.h"
#include "common/dtype.h"
#include "common/shape.h"

namespace distopt {

struct ParameterInfo {
  uint64_t id = 0;
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  int64_t num_elements = 0;
  int64_t byte_size = 0;
  Device device;
  // Incremented by every change of the values.
  uint64_t version = 0;
};

}  // namespace distopt

#endif  // DISTOPT_COMMON_PARAMETER_INFO_H_
