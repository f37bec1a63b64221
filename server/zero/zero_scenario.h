// A test harness for ZeroOptimizer: runs a training scenario on W gloo
// ranks (threads of this process, over loopback TCP) and the same training
// on one local optimizer per group fed the averaged gradients, computed as
// the all-reduce does (fp32 sums of exactly representable values, times
// 1/W, rounded to the parameter's dtype), so the two must agree bit for
// bit.
#ifndef DISTOPT_SERVER_ZERO_ZERO_SCENARIO_H_
#define DISTOPT_SERVER_ZERO_ZERO_SCENARIO_H_

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "server/comm/communicator.h"
#include "server/comm/forwarding_communicator.h"
#include "server/data_parallel/testing/test_values.h"
#include "server/optim/hyperparameters.h"
#include "server/zero/zero_optimizer.h"

namespace distopt {
namespace zero_testing {

using data_parallel_testing::FromFloats;
using data_parallel_testing::Gradient;
using data_parallel_testing::Initial;
using data_parallel_testing::ParamSpec;
using data_parallel_testing::ToFloats;

struct Scenario {
  std::string kind = "adam";
  int world = 2;
  ZeroOptions options;
  int steps = 10;
  std::vector<std::vector<ParamSpec>> groups;
  std::vector<absl::flat_hash_map<std::string, HyperValue>> hyperparameters;
  // Whether rank r has a gradient for parameter i of group g at step s.
  std::function<bool(int s, int r, int g, int i)> has_gradient =
      [](int, int, int, int) { return true; };
  // Steps of data per rank (default: all); a rank with fewer joins after
  // its last one.
  std::vector<int> data_steps;
  // The last group is added by AddParamGroup before this step (-1: never).
  int add_last_group_at = -1;
  // Rank r's gradient of parameter (g, i) at step s (default: values whose
  // sums are exact in any order, data_parallel_testing::Gradient).
  std::function<Tensor(int g, int i, int s, int r, const ParamSpec& spec)>
      gradient = data_parallel_testing::Gradient;
  // The ranks' tensors go through a staged communicator with chunks of
  // this many bytes (0: straight through gloo), host memory standing in
  // for the GPU, as in a group of GPU ranks that share one: the optimizer
  // must send every tensor through Communicator::tensors().
  size_t staged_chunk_bytes = 0;
};

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
    broadcast_bytes += bytes.size();
    return ForwardingCommunicator::BroadcastBytes(bytes, root);
  }

  void StartCounting() {
    calls_ = 0;
    all_reduce_bytes = reduce_scatter_bytes = all_gather_bytes =
        broadcast_bytes = 0;
  }
  bool started(int n) const { return calls_ >= n; }

  std::atomic<size_t> all_reduce_bytes{0};
  std::atomic<size_t> reduce_scatter_bytes{0};
  std::atomic<size_t> all_gather_bytes{0};
  std::atomic<size_t> broadcast_bytes{0};

 private:
  absl::Status Forward(
      absl::FunctionRef<absl::Status(Communicator&)> call) override {
    return call(inner_);
  }

  Communicator& inner_;
  std::atomic<int> calls_{0};
};

struct Outcome {
  // [rank][group][index], and the reference's [group][index].
  std::vector<std::vector<std::vector<Tensor>>> ranks;
  std::vector<std::vector<Tensor>> reference;
  std::vector<int64_t> state_bytes;     // Per rank.
  std::vector<int64_t> scratch_bytes;   // Per rank, after the last step.
  int64_t reference_state_bytes = 0;    // All groups.
  int64_t largest_parameter_state = 0;  // One parameter's, at most.
  std::vector<int64_t> shadowed_steps;  // Per rank, from Join.
  // With staged_chunk_bytes: the bytes each rank's control communicator
  // carried in the collectives CountingCommunicator counts.
  std::vector<int64_t> control_bytes;
};

// Runs body(communicator) on `world` gloo ranks at once.
void OnRanks(int world, const std::function<void(Communicator&)>& body);

// Fails the current test (and returns what it has) on any error.
Outcome Run(const Scenario& scenario);

}  // namespace zero_testing
}  // namespace distopt

#endif  // DISTOPT_SERVER_ZERO_ZERO_SCENARIO_H_
