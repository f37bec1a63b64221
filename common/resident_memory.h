// This process's resident memory, as the kernel counts it: for the
// daemon's gauge and the tests that watch memory go back to the system.
#ifndef DISTOPT_COMMON_RESIDENT_MEMORY_H_
#define DISTOPT_COMMON_RESIDENT_MEMORY_H_

#include <cstdint>

namespace distopt {

// Resident bytes from /proc/self/statm; -1 if it cannot be read.
int64_t ResidentBytes();

}  // namespace distopt

#endif  // DISTOPT_COMMON_RESIDENT_MEMORY_H_
