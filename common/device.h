// Where a tensor lives: host memory or one CUDA device.
#ifndef DISTOPT_COMMON_DEVICE_H_
#define DISTOPT_COMMON_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distopt {

struct Device {
  enum class Kind { kCpu, kCuda };

  static Device Cpu() { return Device{Kind::kCpu, 0}; }
  static Device Cuda(int index) { return Device{Kind::kCuda, index}; }

  bool is_cpu() const { return kind == Kind::kCpu; }
  bool is_cuda() const { return kind == Kind::kCuda; }
  // "cpu" or "cuda:N", as torch.device prints them.
  std::string ToString() const;

  friend bool operator==(const Device& a, const Device& b) {
    return a.kind == b.kind && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }

  Kind kind = Kind::kCpu;
  int index = 0;
};

// Parses "cpu", "cuda" (= cuda:0) or "cuda:N"; INVALID_ARGUMENT otherwise.
absl::StatusOr<Device> ParseDevice(absl::string_view text);

}  // namespace distopt

#endif  // DISTOPT_COMMON_DEVICE_H_
