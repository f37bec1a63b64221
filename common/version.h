// distopt's version, as the daemon and distoptctl report it (build info
// metric, StatusService, --version).
#ifndef DISTOPT_COMMON_VERSION_H_
#define DISTOPT_COMMON_VERSION_H_

namespace distopt {

inline constexpr char kVersion[] = "0.17.0";

}  // namespace distopt

#endif  // DISTOPT_COMMON_VERSION_H_
