// AutogradOp: an operation the daemon runs for trainers inside a
// distributed autograd context, with its forward and its backward.
//
// Forward reads the inputs (host tensors from the wire) and the parameters
// (locked for reading by the caller, so never half-updated) and keeps in
// `saved` what its backward needs. Backward receives the output gradients
// and returns the input gradients and the parameters' gradients, dense or,
// for ops that touch a few rows (embedding), by row. Ops are stateless and
// thread-safe.
#ifndef DISTOPT_SERVER_AUTOGRAD_OP_H_
#define DISTOPT_SERVER_AUTOGRAD_OP_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"

namespace distopt {

// A parameter's gradient from one backward: dense, or rows of a 2-D
// parameter (row_values is [rows.size(), columns]).
struct OpParameterGradient {
  std::optional<Tensor> dense;
  std::vector<int64_t> rows;
  Tensor row_values;
};

struct OpGradients {
  // One per input; nullopt for inputs without a gradient (indices).
  std::vector<std::optional<Tensor>> inputs;
  std::vector<OpParameterGradient> parameters;  // One per parameter.
};

class AutogradOp {
 public:
  virtual ~AutogradOp() = default;

  // INVALID_ARGUMENT naming "inputs[i]" or "parameter_ids[i]" when the
  // tensors do not fit the op; ReplyTooLarge (reply_limit.h) before any
  // output is allocated when the outputs would pass `output_limit` bytes.
  virtual absl::StatusOr<std::vector<Tensor>> Forward(
      absl::Span<const Tensor> inputs, absl::Span<const Tensor* const> params,
      std::vector<Tensor>* saved,
      int64_t output_limit = std::numeric_limits<int64_t>::max()) const = 0;

  // `output_gradients` match the forward's outputs (checked by the caller).
  virtual absl::StatusOr<OpGradients> Backward(
      absl::Span<const Tensor> saved, absl::Span<const Tensor* const> params,
      absl::Span<const Tensor> output_gradients) const = 0;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_AUTOGRAD_OP_H_
