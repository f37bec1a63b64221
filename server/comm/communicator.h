// Communicator: collectives among the ranks of a data-parallel group. The
// gloo backend (gloo_communicator.h) serves CPU tensors. Every collective has
// a timeout: a dead or missing peer is an error on each surviving rank,
// never a hang. One collective at a time per communicator (the caller
// serialises, as torch's process groups do per stream).
#ifndef DISTOPT_SERVER_COMM_COMMUNICATOR_H_
#define DISTOPT_SERVER_COMM_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/device.h"
#include "common/device_buffer.h"

namespace distopt {

enum class ReduceOp { kSum, kAverage };

// A collective that failed on the wire (a timeout, a lost peer) leaves its
// communicator unusable; its status says so by this payload, which a
// status built by local checks does not carry.
inline constexpr char kCollectiveFailurePayload[] =
    "distopt-collective-failure";
inline void MarkCollectiveFailure(absl::Status& status) {
  status.SetPayload(kCollectiveFailurePayload, absl::Cord("1"));
}
inline bool IsCollectiveFailure(const absl::Status& status) {
  return status.GetPayload(kCollectiveFailurePayload).has_value();
}
// A rank that cannot do its part of a collective sequence (no memory for a
// bucket, a failed device copy) fails as a lost peer would: its error is a
// collective failure, its round is broken, and its peers' next collectives
// time out, rather than the ranks going on with collectives that no longer
// pair up. OK stays OK.
inline absl::Status AsCollectiveFailure(absl::Status status) {
  if (!status.ok()) MarkCollectiveFailure(status);
  return status;
}

// fp32 values as the bytes the byte collectives take.
inline absl::Span<char> AsBytes(absl::Span<float> values) {
  return absl::Span<char>(reinterpret_cast<char*>(values.data()),
                          values.size() * sizeof(float));
}

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Where the spans of this communicator's collectives point: host memory
  // for gloo, one GPU's memory for NCCL and the staged communicator.
  virtual Device device() const { return Device::Cpu(); }
  // The communicator a data-parallel optimizer sends its tensors through
  // (gradient buckets, parameters), on the device its parameters live on:
  // this one, for a group over host memory. A group of GPU ranks keeps
  // this one (host memory, gloo) for the small control collectives
  // (agreement, step headers, state dicts) and returns its NCCL or staged
  // communicator here; both pair up in the same order on every rank.
  virtual Communicator& tensors() { return *this; }

  // Bounds each later collective: a peer that does not take part within
  // `timeout` is an error (DEADLINE_EXCEEDED).
  virtual void SetTimeout(absl::Duration timeout) = 0;

  // In place: every rank ends with the reduction over all ranks.
  virtual absl::Status AllReduce(absl::Span<float> values, ReduceOp op) = 0;
  // In place: every rank ends with `root`'s values.
  virtual absl::Status Broadcast(absl::Span<float> values, int root) = 0;
  // `output` (size() x input.size()) ends with every rank's input, in rank
  // order.
  virtual absl::Status AllGather(absl::Span<const float> input,
                                 absl::Span<float> output) = 0;
  // `input` (size() x output.size()) is reduced over all ranks; rank r
  // keeps block r of the result in `output`.
  virtual absl::Status ReduceScatter(absl::Span<const float> input,
                                     absl::Span<float> output, ReduceOp op) = 0;
  // In place, over blocks of counts[r] elements in rank order (the counts,
  // the same on every rank, add up to values.size()): block rank() ends
  // with the reduction of that block over all ranks; the other blocks are
  // scratch afterwards. Each rank sends and receives (W-1)/W of the bytes.
  virtual absl::Status ReduceScatterBlocks(absl::Span<float> values,
                                           absl::Span<const size_t> counts,
                                           ReduceOp op) = 0;
  // In place, over blocks of counts[r] bytes in rank order: block r of
  // every rank ends with what rank r held in it. (W-1)/W of the bytes each.
  virtual absl::Status AllGatherBlocks(absl::Span<char> bytes,
                                       absl::Span<const size_t> counts) = 0;
  // The same over memory in pieces: block r is the byte spans blocks[r]
  // (the same sizes on every rank), this rank's own read, the others'
  // written, so that the bytes go straight from and to where they live (a
  // parameter's tensor, say). This default packs them into one buffer of
  // the blocks' total size on device(), kept from call to call, around
  // AllGatherBlocks.
  virtual absl::Status AllGatherSegments(
      const std::vector<std::vector<absl::Span<char>>>& blocks);
  // ReduceScatterBlocks over memory in pieces, out of place: block r is the
  // spans inputs[r] (the same sizes on every rank), only read, so that the
  // values go out from where they live (a bucket's gradients, say), and
  // this rank's block's reduction is written to `output` (its spans'
  // total). This default packs them into the AllGatherSegments buffer (the
  // blocks' total size on device()) around ReduceScatterBlocks.
  virtual absl::Status ReduceScatterSegments(
      const std::vector<std::vector<absl::Span<const float>>>& inputs,
      absl::Span<float> output, ReduceOp op);
  // ReduceScatterSegments handing this rank's block's reduction to `take`
  // piece by piece, in order, each as soon as it is complete (gloo's ring:
  // a chunk, 1 MiB at most), instead of writing it anywhere: `at` is the
  // piece's first element in the block, its values (on device()) are valid
  // during the call only. So a consumer (an optimizer stepping those
  // elements) reads them while they are in cache, and no buffer of the
  // block's size is written and read again.
  // `take` is called one piece at a time, while the call lasts: on the
  // calling thread, or on a thread beside the transfers (gloo's ring, so
  // that the next pieces arrive while one is taken). Its time counts in
  // the collective's (against its timeout, and in its metrics), and it
  // must not throw nor call the communicator. This default hands over the
  // block whole (once, empty or not), on the calling thread, reduced in
  // the AllGatherSegments buffer as above.
  using ReducedPieces =
      absl::FunctionRef<void(size_t at, absl::Span<const float> values)>;
  virtual absl::Status ReduceScatterSegmentsPiecewise(
      const std::vector<std::vector<absl::Span<const float>>>& inputs,
      ReduceOp op, ReducedPieces take);
  virtual absl::Status Barrier() = 0;

  // Bytes this communicator keeps between collectives for its own use (the
  // default AllGatherSegments' packing buffer; a staged communicator's
  // page-locked chunks), which a data-parallel optimizer reports with its
  // scratch. Read where the collectives run (under the same lock).
  virtual int64_t kept_bytes() const;

  // The same on raw bytes, for tensors of any dtype and serialised
  // messages. In place: every rank ends with `root`'s bytes.
  virtual absl::Status BroadcastBytes(absl::Span<char> bytes, int root) = 0;
  // Every rank sends `input` (the same size on all ranks); `root` receives
  // them in rank order in `output` (size() x input.size()), which the other
  // ranks leave untouched and may pass empty.
  virtual absl::Status GatherBytes(absl::Span<const char> input,
                                   absl::Span<char> output, int root) = 0;

 private:
  // The default AllGatherSegments' and ReduceScatterSegments' buffer on
  // device() (made when first used), or an error.
  absl::StatusOr<DeviceBuffer*> Packing();
  // The default ReduceScatterSegments' work: `inputs` packed into that
  // buffer and reduce-scattered there; returns this rank's block in it.
  absl::StatusOr<absl::Span<float>> PackedReduceScatter(
      const std::vector<std::vector<absl::Span<const float>>>& inputs,
      ReduceOp op);

  // That buffer (null until first used).
  std::unique_ptr<DeviceBuffer> packing_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_COMMUNICATOR_H_
