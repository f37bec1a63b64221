// A test harness for ZeroOptimizer: runs a training scenario on W gloo
// ranks (threads of this process, over loopback TCP) and the same training
// on one local optimizer per group fed the averaged gradients, computed as
// the all-reduce does (fp32 sums of exactly representable values, times
// 1/W, rounded to the parameter's dtype), so the two must agree bit for
// bit.
#ifndef DISTOPT_SERVER_ZERO_ZERO_SCENARIO_H_
#define DISTOPT_SERVER_ZERO_ZERO_SCENARIO_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "server/comm/communicator.h"
#include "server/comm/testing/counting_communicator.h"
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
using ::distopt::testing::CountingCommunicator;

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
