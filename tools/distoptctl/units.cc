#include "tools/distoptctl/units.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_format.h"

namespace distopt {
namespace distoptctl {

std::string FormatBytes(double bytes) {
  if (!std::isfinite(bytes)) return "-";
  if (std::fabs(bytes) < 1024) return absl::StrFormat("%.0f B", bytes);
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = bytes / 1024;
  int unit = 0;
  while (std::fabs(value) >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string FormatSeconds(std::optional<double> seconds) {
  if (!seconds.has_value() || !std::isfinite(*seconds) || *seconds < 0) {
    return "-";
  }
  const double s = *seconds;
  if (s < 1e-3) return absl::StrFormat("%.0fus", s * 1e6);
  if (s < 1) return absl::StrFormat("%.1fms", s * 1e3);
  if (s < 60) return absl::StrFormat("%.1fs", s);
  const int64_t whole = static_cast<int64_t>(s);
  if (whole < 3600) {
    return absl::StrFormat("%dm%02ds", whole / 60, whole % 60);
  }
  if (whole < 86400) {
    return absl::StrFormat("%dh%02dm", whole / 3600, whole % 3600 / 60);
  }
  return absl::StrFormat("%dd%02dh", whole / 86400, whole % 86400 / 3600);
}

std::string FormatRate(double per_second) {
  return absl::StrFormat("%.1f", per_second);
}

}  // namespace distoptctl
}  // namespace distopt
