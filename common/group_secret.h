// The metadata that carries a data-parallel group's secret on calls to its
// key-value store (GroupService Set, Get, Wait, Add, Delete): only the
// group's ranks, which read the secret from --group_secret_file, may use it.
#ifndef DISTOPT_COMMON_GROUP_SECRET_H_
#define DISTOPT_COMMON_GROUP_SECRET_H_

#include <cstddef>

namespace distopt {

inline constexpr char kGroupSecretMetadata[] = "distopt-group-secret";
// Shorter secrets are refused at start-up.
inline constexpr size_t kMinGroupSecretBytes = 16;

}  // namespace distopt

#endif  // DISTOPT_COMMON_GROUP_SECRET_H_
