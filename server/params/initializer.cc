#include "server/params/initializer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"

namespace distopt {
namespace {

absl::Status RequireFinite(double value, absl::string_view field) {
  if (std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", value, " is not finite; expected a number"));
}

absl::Status RequireFloatingPoint(DType dtype, absl::string_view field) {
  if (IsFloatingPoint(dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field,
      ": random initializers apply to float32, float16 and bfloat16 "
      "parameters; expected zeros, constant or values for ",
      DTypeName(dtype)));
}

// Uniform double in [0, 1) from the top 53 bits: the same on every platform,
// unlike std::uniform_real_distribution.
double UnitUniform(std::mt19937_64& engine) {
  return static_cast<double>(engine() >> 11) * 0x1.0p-53;
}

// Generates `count` fp32 values into `out` and converts them to `dtype`.
template <typename Generator>
void GenerateInto(DType dtype, size_t count, Generator next, char* out) {
  for (size_t i = 0; i < count; ++i) {
    const float value = static_cast<float>(next());
    switch (dtype) {
      case DType::kFloat32:
        std::memcpy(out + 4 * i, &value, 4);
        break;
      case DType::kFloat16: {
        const uint16_t bits = FloatToHalf(value);
        std::memcpy(out + 2 * i, &bits, 2);
        break;
      }
      case DType::kBFloat16: {
        const uint16_t bits = FloatToBFloat16(value);
        std::memcpy(out + 2 * i, &bits, 2);
        break;
      }
      case DType::kInt64:
        break;  // Rejected by ValidateInitializer.
    }
  }
}

// Fills `tensor` block by block from `next`, staging each block in host
// memory, so that a large GPU tensor never needs a host copy of its size.
template <typename Generator>
absl::Status FillRandom(Backend& backend, Tensor& tensor, Generator next) {
  constexpr size_t kBlockElements = size_t{1} << 20;
  const size_t element_size = ElementSize(tensor.dtype());
  const size_t total = static_cast<size_t>(tensor.num_elements());
  std::vector<char> block(std::min(total, kBlockElements) * element_size);
  char* base = static_cast<char*>(tensor.data());
  for (size_t start = 0; start < total; start += kBlockElements) {
    const size_t count = std::min(kBlockElements, total - start);
    GenerateInto(tensor.dtype(), count, next, block.data());
    absl::Status status = backend.CopyFromHost(
        base + start * element_size, block.data(), count * element_size);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// The largest finite value of a floating-point dtype.
double LargestFinite(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return 65504.0;
    case DType::kBFloat16:
      return 0x1.fep127;
    default:
      return std::numeric_limits<float>::max();
  }
}

}  // namespace

absl::Status ValidateInitializer(const Initializer& init, DType dtype,
                                 size_t byte_size) {
  if (const auto* constant = std::get_if<ConstantInit>(&init)) {
    absl::Status status =
        RequireFinite(constant->value, "initializer.constant.value");
    if (!status.ok()) return status;
    if (dtype == DType::kInt64 &&
        (std::trunc(constant->value) != constant->value ||
         std::fabs(constant->value) > 0x1.0p62)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "initializer.constant.value: ", constant->value,
          " for an int64 parameter; expected an integer of magnitude at most "
          "2^62"));
    }
    // Beyond the dtype's largest finite value the parameter would silently
    // hold inf.
    const double largest = LargestFinite(dtype);
    if (dtype != DType::kInt64 && std::fabs(constant->value) > largest) {
      return absl::InvalidArgumentError(absl::StrCat(
          "initializer.constant.value: ", constant->value, " for a ",
          DTypeName(dtype), " parameter; expected a magnitude of at most ",
          largest, " (the largest finite ", DTypeName(dtype), ")"));
    }
  } else if (const auto* uniform = std::get_if<UniformInit>(&init)) {
    absl::Status status = RequireFloatingPoint(dtype, "initializer.uniform");
    if (status.ok())
      status = RequireFinite(uniform->low, "initializer.uniform.low");
    if (status.ok()) {
      status = RequireFinite(uniform->high, "initializer.uniform.high");
    }
    if (!status.ok()) return status;
    if (uniform->low > uniform->high) {
      return absl::InvalidArgumentError(
          absl::StrCat("initializer.uniform: low ", uniform->low, " > high ",
                       uniform->high, "; expected low <= high"));
    }
  } else if (const auto* normal = std::get_if<NormalInit>(&init)) {
    absl::Status status = RequireFloatingPoint(dtype, "initializer.normal");
    if (status.ok())
      status = RequireFinite(normal->mean, "initializer.normal.mean");
    if (status.ok()) {
      status = RequireFinite(normal->stddev, "initializer.normal.stddev");
    }
    if (!status.ok()) return status;
    if (normal->stddev < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("initializer.normal.stddev: ", normal->stddev,
                       " is negative; expected stddev >= 0"));
    }
  } else if (const auto* values = std::get_if<ValuesInit>(&init)) {
    if (values->bytes.size() != byte_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("initializer.values.data: ", values->bytes.size(),
                       " bytes; expected ", byte_size, " (shape x sizeof(",
                       DTypeName(dtype), "))"));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyInitializer(const Initializer& init, Backend& backend,
                              Tensor& tensor) {
  const size_t count = static_cast<size_t>(tensor.num_elements());
  if (std::holds_alternative<ZerosInit>(init)) {
    return backend.Fill(tensor.data(), tensor.dtype(), count, 0.0);
  }
  if (const auto* constant = std::get_if<ConstantInit>(&init)) {
    return backend.Fill(tensor.data(), tensor.dtype(), count, constant->value);
  }
  if (const auto* values = std::get_if<ValuesInit>(&init)) {
    return backend.CopyFromHost(tensor.data(), values->bytes.data(),
                                values->bytes.size());
  }
  if (const auto* uniform = std::get_if<UniformInit>(&init)) {
    std::mt19937_64 engine(uniform->seed);
    const double low = uniform->low;
    const double span = uniform->high - uniform->low;
    return FillRandom(backend, tensor,
                      [&] { return low + span * UnitUniform(engine); });
  }
  const auto& normal = std::get<NormalInit>(init);
  std::mt19937_64 engine(normal.seed);
  // Box-Muller, both outputs used: portable, unlike std::normal_distribution.
  bool have_spare = false;
  double spare = 0;
  return FillRandom(backend, tensor, [&] {
    if (have_spare) {
      have_spare = false;
      return normal.mean + normal.stddev * spare;
    }
    const double u1 = 1.0 - UnitUniform(engine);  // (0, 1]: log is finite.
    const double u2 = UnitUniform(engine);
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * M_PI * u2;
    spare = radius * std::sin(angle);
    have_spare = true;
    return normal.mean + normal.stddev * radius * std::cos(angle);
  });
}

}  // namespace distopt
