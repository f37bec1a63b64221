// For tests: a communicator that passes every collective to another and
// counts what it was given.
#ifndef DISTOPT_SERVER_COMM_TESTING_COUNTING_COMMUNICATOR_H_
#define DISTOPT_SERVER_COMM_TESTING_COUNTING_COMMUNICATOR_H_

#include <atomic>
#include <cstddef>
#include <vector>

#include "server/comm/forwarding_communicator.h"

namespace distopt {
namespace testing {

// Passes every collective to the inner communicator, counting the all-reduces
// (started(n) says whether the n-th has begun) and the bytes each kind was
// given.
class CountingCommunicator : public ForwardingCommunicator {
 public:
  explicit CountingCommunicator(Communicator& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void SetTimeout(absl::Duration timeout) override {
    inner_.SetTimeout(timeout);
  }
  int64_t kept_bytes() const override { return inner_.kept_bytes(); }
  absl::Status AllReduce(absl::Span<float> values, ReduceOp op) override {
    ++calls_;
    all_reduce_bytes += values.size() * sizeof(float);
    return ForwardingCommunicator::AllReduce(values, op);
  }
  absl::Status ReduceScatterBlocks(absl::Span<float> values,
                                   absl::Span<const size_t> counts,
                                   ReduceOp op) override {
    reduce_scatter_bytes += values.size() * sizeof(float);
    return ForwardingCommunicator::ReduceScatterBlocks(values, counts, op);
  }
  absl::Status ReduceScatterSegments(
      const std::vector<std::vector<absl::Span<const float>>>& inputs,
      absl::Span<float> output, ReduceOp op) override {
    reduce_scatter_segments_bytes += BytesOf(inputs);
    return ForwardingCommunicator::ReduceScatterSegments(inputs, output, op);
  }
  absl::Status ReduceScatterSegmentsPiecewise(
      const std::vector<std::vector<absl::Span<const float>>>& inputs,
      ReduceOp op, ReducedPieces take) override {
    reduce_scatter_segments_bytes += BytesOf(inputs);
    return ForwardingCommunicator::ReduceScatterSegmentsPiecewise(inputs, op,
                                                                  take);
  }
  absl::Status AllGatherBlocks(absl::Span<char> bytes,
                               absl::Span<const size_t> counts) override {
    all_gather_bytes += bytes.size();
    return ForwardingCommunicator::AllGatherBlocks(bytes, counts);
  }
  absl::Status AllGatherSegments(
      const std::vector<std::vector<absl::Span<char>>>& blocks) override {
    for (const auto& block : blocks) {
      for (absl::Span<char> segment : block) all_gather_bytes += segment.size();
    }
    return ForwardingCommunicator::AllGatherSegments(blocks);
  }
  absl::Status BroadcastBytes(absl::Span<char> bytes, int root) override {
    ++broadcasts;
    broadcast_bytes += bytes.size();
    return ForwardingCommunicator::BroadcastBytes(bytes, root);
  }

  void StartCounting() {
    calls_ = 0;
    all_reduce_bytes = reduce_scatter_bytes = reduce_scatter_segments_bytes =
        all_gather_bytes = broadcast_bytes = 0;
    broadcasts = 0;
  }
  bool started(int n) const { return calls_ >= n; }

  std::atomic<size_t> all_reduce_bytes{0};
  std::atomic<size_t> reduce_scatter_bytes{0};
  // Through ReduceScatterSegments (whose default also counts its packed
  // ReduceScatterBlocks above).
  std::atomic<size_t> reduce_scatter_segments_bytes{0};
  std::atomic<size_t> all_gather_bytes{0};
  std::atomic<size_t> broadcast_bytes{0};
  std::atomic<int> broadcasts{0};

 private:
  static size_t BytesOf(
      const std::vector<std::vector<absl::Span<const float>>>& inputs) {
    size_t bytes = 0;
    for (const auto& block : inputs) {
      for (absl::Span<const float> segment : block) {
        bytes += segment.size() * sizeof(float);
      }
    }
    return bytes;
  }

  absl::Status Forward(
      absl::FunctionRef<absl::Status(Communicator&)> call) override {
    return call(inner_);
  }

  Communicator& inner_;
  std::atomic<int> calls_{0};
};

}  // namespace testing
}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_TESTING_COUNTING_COMMUNICATOR_H_
