// Host-memory backend.
#ifndef DISTOPT_COMMON_CPU_BACKEND_H_
#define DISTOPT_COMMON_CPU_BACKEND_H_

#include <memory>

#include "common/backend.h"

namespace distopt {

// The process's one CPU backend. Thread-safe.
std::shared_ptr<Backend> CpuBackend();

}  // namespace distopt

#endif  // DISTOPT_COMMON_CPU_BACKEND_H_
