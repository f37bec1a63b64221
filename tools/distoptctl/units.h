// Numbers as distoptctl's tables show them: bytes in binary units,
// durations from microseconds to days, rates with one decimal.
#ifndef DISTOPT_TOOLS_DISTOPTCTL_UNITS_H_
#define DISTOPT_TOOLS_DISTOPTCTL_UNITS_H_

#include <optional>
#include <string>

namespace distopt {
namespace distoptctl {

// "512 B", "1.5 KiB", "3.0 MiB", ... up to TiB.
std::string FormatBytes(double bytes);
// "350us", "1.2ms", "4.5s", "5m12s", "3h05m", "2d03h"; "-" when absent.
std::string FormatSeconds(std::optional<double> seconds);
// "812.0".
std::string FormatRate(double per_second);

}  // namespace distoptctl
}  // namespace distopt

#endif  // DISTOPT_TOOLS_DISTOPTCTL_UNITS_H_
