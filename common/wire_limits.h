// Message sizes the daemon and the client agree on.
//
// Unary calls that carry tensors (Forward, Backward, AccumulateGradients,
// GetGradients) take up to kMaxTensorPayloadBytes of tensor data per call
// and say so with RESOURCE_EXHAUSTED beyond it, instead of failing in gRPC;
// parameter values of any size go through the streaming ReadParameter and
// WriteParameter.
#ifndef DISTOPT_COMMON_WIRE_LIMITS_H_
#define DISTOPT_COMMON_WIRE_LIMITS_H_

#include <cstdint>

namespace distopt {

// The largest gRPC message either side accepts.
inline constexpr int kMaxMessageBytes = 64 << 20;
// Tensor bytes one unary call may carry; the rest of the message fits in
// the difference.
inline constexpr int64_t kMaxTensorPayloadBytes = int64_t{60} << 20;

}  // namespace distopt

#endif  // DISTOPT_COMMON_WIRE_LIMITS_H_
