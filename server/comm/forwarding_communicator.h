// A Communicator whose collectives all go through one function, Forward,
// that hands them on to another communicator: for wrappers that route or
// watch the calls (the group's current round, a test's counters) without
// restating every collective.
#ifndef DISTOPT_SERVER_COMM_FORWARDING_COMMUNICATOR_H_
#define DISTOPT_SERVER_COMM_FORWARDING_COMMUNICATOR_H_

#include "absl/functional/function_ref.h"
#include "server/comm/communicator.h"

namespace distopt {

class ForwardingCommunicator : public Communicator {
 public:
  absl::Status AllReduce(absl::Span<float> values, ReduceOp op) override {
    return Forward([&](Communicator& c) { return c.AllReduce(values, op); });
  }
  absl::Status Broadcast(absl::Span<float> values, int root) override {
    return Forward([&](Communicator& c) { return c.Broadcast(values, root); });
  }
  absl::Status AllGather(absl::Span<const float> input,
                         absl::Span<float> output) override {
    return Forward([&](Communicator& c) { return c.AllGather(input, output); });
  }
  absl::Status ReduceScatter(absl::Span<const float> input,
                             absl::Span<float> output, ReduceOp op) override {
    return Forward(
        [&](Communicator& c) { return c.ReduceScatter(input, output, op); });
  }
  absl::Status ReduceScatterBlocks(absl::Span<float> values,
                                   absl::Span<const size_t> counts,
                                   ReduceOp op) override {
    return Forward([&](Communicator& c) {
      return c.ReduceScatterBlocks(values, counts, op);
    });
  }
  absl::Status AllGatherBlocks(absl::Span<char> bytes,
                               absl::Span<const size_t> counts) override {
    return Forward(
        [&](Communicator& c) { return c.AllGatherBlocks(bytes, counts); });
  }
  absl::Status AllGatherSegments(
      const std::vector<std::vector<absl::Span<char>>>& blocks) override {
    return Forward(
        [&](Communicator& c) { return c.AllGatherSegments(blocks); });
  }
  absl::Status ReduceScatterSegments(
      const std::vector<std::vector<absl::Span<const float>>>& inputs,
      absl::Span<float> output, ReduceOp op) override {
    return Forward([&](Communicator& c) {
      return c.ReduceScatterSegments(inputs, output, op);
    });
  }
  absl::Status ReduceScatterSegmentsPiecewise(
      const std::vector<std::vector<absl::Span<const float>>>& inputs,
      ReduceOp op, ReducedPieces take) override {
    return Forward([&](Communicator& c) {
      return c.ReduceScatterSegmentsPiecewise(inputs, op, take);
    });
  }
  absl::Status Barrier() override {
    return Forward([&](Communicator& c) { return c.Barrier(); });
  }
  absl::Status BroadcastBytes(absl::Span<char> bytes, int root) override {
    return Forward(
        [&](Communicator& c) { return c.BroadcastBytes(bytes, root); });
  }
  absl::Status GatherBytes(absl::Span<const char> input,
                           absl::Span<char> output, int root) override {
    return Forward(
        [&](Communicator& c) { return c.GatherBytes(input, output, root); });
  }

 protected:
  // Runs `call` on the communicator the collectives go to.
  virtual absl::Status Forward(
      absl::FunctionRef<absl::Status(Communicator&)> call) = 0;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_COMM_FORWARDING_COMMUNICATOR_H_
