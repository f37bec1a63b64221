// absl::Status errors as Python exceptions: a failed call raises
// distopt.Error (python/distopt/errors.py) with the gRPC status code and the
// message, which names the worker and the call.
#ifndef DISTOPT_PYTHON_SRC_STATUS_H_
#define DISTOPT_PYTHON_SRC_STATUS_H_

#include <stdexcept>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pybind11/pybind11.h"

namespace distopt {
namespace python {

// Thrown by the bindings; translated to distopt.Error.
class StatusError : public std::exception {
 public:
  explicit StatusError(absl::Status status) : status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }
  const char* what() const noexcept override { return "distopt call failed"; }

 private:
  absl::Status status_;
};

inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> result) {
  if (!result.ok()) throw StatusError(result.status());
  return *std::move(result);
}

// Registers the translation of StatusError on module `m`.
void RegisterStatusTranslator();

}  // namespace python
}  // namespace distopt

#endif  // DISTOPT_PYTHON_SRC_STATUS_H_
