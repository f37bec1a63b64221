// AutogradEngine: the worker half of distributed autograd. A forward runs an
// op on parameters of this daemon and records what its backward needs in
// the context; a backward accumulates the parameters' gradients in the
// context and returns the inputs' gradients; gradients computed elsewhere
// are pushed in and read back. Holds no state of its own: contexts live in
// the ContextTable, parameters in the ParameterStore.
//
// Every call checks all it is given before it changes anything, so a
// refused call leaves the context as it was. `reply_limit` bounds the
// tensor bytes of a call's reply: over it the call is refused
// (RESOURCE_EXHAUSTED with the kReplyTooLargeMetadata payload, so the
// caller can send it again over a transport that carries more) before
// anything changes. Every call names its caller's identity: a context
// belongs to the identity that made it (see ContextTable). Thread-safe.
#ifndef DISTOPT_SERVER_AUTOGRAD_AUTOGRAD_ENGINE_H_
#define DISTOPT_SERVER_AUTOGRAD_AUTOGRAD_ENGINE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "server/autograd/context_table.h"
#include "server/autograd/op_registry.h"
#include "server/params/parameter_store.h"

namespace distopt {

struct ForwardCall {
  uint64_t context_id = 0;
  // The client's identity under mutual TLS (contexts are its own), or "".
  std::string caller;
  std::string op;
  std::vector<uint64_t> parameter_ids;
  std::vector<Tensor> inputs;  // Host tensors.
};

struct ForwardResult {
  std::vector<Tensor> outputs;  // Host tensors.
  uint64_t forward_id = 0;
};

// A gradient for one parameter, pushed in or read out of a context.
struct ParameterGradient {
  uint64_t parameter_id = 0;
  Tensor gradient;  // Host tensor.
};

class AutogradEngine {
 public:
  // All three must outlive the engine.
  AutogradEngine(ContextTable* contexts, ParameterStore* parameters,
                 const OpRegistry* ops)
      : contexts_(contexts), parameters_(parameters), ops_(ops) {}

  // Runs `call.op` under shared locks of its parameters (a step never
  // changes them mid-forward). NOT_FOUND for an unknown op or parameter;
  // INVALID_ARGUMENT for a parameter named twice or inputs the op refuses.
  absl::StatusOr<ForwardResult> Forward(const ForwardCall& call,
                                        int64_t reply_limit);

  // The inputs' gradients of forward `forward_id` (nullopt where an input
  // has none). NOT_FOUND for an unknown context or forward;
  // INVALID_ARGUMENT for output gradients unlike the outputs;
  // FAILED_PRECONDITION when a parameter was stepped since the forward (as
  // torch's version check) or deleted.
  absl::StatusOr<std::vector<std::optional<Tensor>>> Backward(
      uint64_t context_id, uint64_t forward_id,
      const std::vector<Tensor>& output_gradients, int64_t reply_limit,
      absl::string_view caller = "");

  // Adds `gradients` to the context's, creating the context. NOT_FOUND for
  // an unknown parameter; INVALID_ARGUMENT for a gradient unlike its
  // parameter.
  absl::Status AccumulateGradients(
      uint64_t context_id, const std::vector<ParameterGradient>& gradients,
      absl::string_view caller = "");

  // The context's gradients of `parameter_ids` (all of its parameters when
  // empty); parameters without one are left out.
  absl::StatusOr<std::vector<ParameterGradient>> GetGradients(
      uint64_t context_id, const std::vector<uint64_t>& parameter_ids,
      int64_t reply_limit, absl::string_view caller = "");

 private:
  ContextTable* const contexts_;
  ParameterStore* const parameters_;
  const OpRegistry* const ops_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_AUTOGRAD_AUTOGRAD_ENGINE_H_
