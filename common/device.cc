#include "common/device.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace distopt {

std::string Device::ToString() const {
  return is_cpu() ? "cpu" : absl::StrCat("cuda:", index);
}

absl::StatusOr<Device> ParseDevice(absl::string_view text) {
  if (text == "cpu") return Device::Cpu();
  if (text == "cuda") return Device::Cuda(0);
  int index = 0;
  absl::string_view number = text;
  if (absl::ConsumePrefix(&number, "cuda:") &&
      absl::SimpleAtoi(number, &index) && index >= 0 && index < 1024) {
    return Device::Cuda(index);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "device: \"", text, "\" is not a device; expected cpu or cuda:N"));
}

}  // namespace distopt
