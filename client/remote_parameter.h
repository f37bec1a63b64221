// RemoteParameter: a reference to a parameter owned by a worker daemon, the
// RRef of distopt. Plain data: cheap to copy, compare and hash.
#ifndef DISTOPT_CLIENT_REMOTE_PARAMETER_H_
#define DISTOPT_CLIENT_REMOTE_PARAMETER_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace distopt {

struct RemoteParameter {
  std::string worker;  // The owning daemon's address, "host:port".
  uint64_t id = 0;     // Assigned by that daemon, never reused there.

  // "127.0.0.1:50051/7".
  std::string ToString() const { return absl::StrCat(worker, "/", id); }

  friend bool operator==(const RemoteParameter& a, const RemoteParameter& b) {
    return a.id == b.id && a.worker == b.worker;
  }
  friend bool operator!=(const RemoteParameter& a, const RemoteParameter& b) {
    return !(a == b);
  }
  template <typename H>
  friend H AbslHashValue(H state, const RemoteParameter& p) {
    return H::combine(std::move(state), p.worker, p.id);
  }
};

}  // namespace distopt

#endif  // DISTOPT_CLIENT_REMOTE_PARAMETER_H_
