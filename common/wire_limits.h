// Message sizes the daemon and the client agree on.
//
// Unary calls that carry tensors (Forward, Backward, AccumulateGradients,
// GetGradients) take up to kMaxTensorPayloadBytes of tensor data per call;
// beyond it their chunked variants (ForwardChunked, ...) carry up to
// kMaxChunkedPayloadBytes. Parameter values of any size go through the
// streaming ReadParameter and WriteParameter.
#ifndef DISTOPT_COMMON_WIRE_LIMITS_H_
#define DISTOPT_COMMON_WIRE_LIMITS_H_

#include <cstdint>

namespace distopt {

// The largest gRPC message either side accepts.
inline constexpr int kMaxMessageBytes = 64 << 20;
// Tensor bytes one unary call may carry; the rest of the message fits in
// the difference.
inline constexpr int64_t kMaxTensorPayloadBytes = int64_t{60} << 20;
// Tensor bytes one chunked autograd call may carry each way: its message is
// serialized whole, and protobuf stops at 2 GiB.
inline constexpr int64_t kMaxChunkedPayloadBytes = int64_t{1920} << 20;
// A chunked autograd call's whole message, as the daemon accepts it: its
// tensors plus room for the rest (ids, shapes, names).
inline constexpr int64_t kMaxChunkedMessageBytes =
    kMaxChunkedPayloadBytes + (int64_t{16} << 20);
// Trailing metadata key of a unary autograd call refused only because its
// reply would exceed kMaxTensorPayloadBytes (nothing was changed; the
// chunked variant of the call will carry it).
inline constexpr char kReplyTooLargeMetadata[] = "distopt-reply-too-large";

}  // namespace distopt

#endif  // DISTOPT_COMMON_WIRE_LIMITS_H_
