// What /metrics shows of the collectives a daemon runs: by backend
// ("gloo", "nccl") and operation ("all-reduce", "reduce-scatter", ...),
// a latency histogram, the bytes of the buffers they ran over (this rank's
// view: the buffer reduced or gathered, not the bytes on the wire), and
// the failures.
#ifndef DISTOPT_SERVER_COMM_COLLECTIVE_METRICS_H_
#define DISTOPT_SERVER_COMM_COLLECTIVE_METRICS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace distopt {

// `backend` and `operation` must be string literals (they are kept).
void RecordCollective(absl::string_view backend, absl::string_view operation,
                      size_t bytes, double seconds, const absl::Status& status);

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_COLLECTIVE_METRICS_H_
