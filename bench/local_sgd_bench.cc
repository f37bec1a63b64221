// Post-local SGD on 2 ranks (two daemons joined over loopback) with 80M
// fp32 parameters (20 x 2000 x 2000): the time to average the parameters
// across the ranks, against PyTorch's PeriodicModelAverager over gloo on the
// same machine in the same run (tools/bench/torch_model_averaging.py; goal:
// faster), and what period 4 saves over an all-reduce of the gradients at
// every step (the bytes, and the time of 4 steps either way).
//
//   bazel run -c opt //bench:local_sgd_bench
//
// Each rank's gradients sit in one context, stepped again and again (a
// post-local SGD step does not consume them). Averaging time: with period 2
// and no gradient reduction, the median of the steps that average minus
// the median of those that do not (both take one plain SGD step).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/data_parallel_ranks.h"
#include "client/data_parallel.h"

namespace distopt {
namespace {

using bench::kLayers;
using bench::kSize;
using bench::Median;
using bench::OnEveryRank;
using bench::Ranks;
using bench::SecondsOf;
using bench::StartRanks;

constexpr int kSteps = 12;

std::map<std::string, double> TorchPeer() {
  const char* python = std::getenv("DISTOPT_TORCH_PYTHON");
  const std::string command =
      absl::StrCat(python != nullptr ? python : "/usr/bin/python3",
                   " tools/bench/torch_model_averaging.py ", bench::kWorld, " ",
                   kLayers, " ", kSize, " 5 2>/dev/null");
  std::map<std::string, double> result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char name[64];
  double seconds = 0;
  while (std::fscanf(pipe, "%63s %lf", name, &seconds) == 2) {
    result[name] = seconds;
  }
  pclose(pipe);
  return result;
}

// Seconds of each of kSteps steps (both ranks at once) of a post-local SGD
// made with `spec`; empty on failure.
std::vector<double> StepTimes(Client& client,
                              v1::CreatePostLocalSgdRequest spec) {
  Ranks ranks;
  if (!StartRanks(client, ranks)) return {};
  spec.set_kind("sgd");
  spec.set_timeout_ms(600000);
  v1::ZeroParamGroup* group = spec.add_groups();
  (*group->mutable_hyperparameters())["lr"].set_number(1e-3);
  for (int layer = 0; layer < kLayers; ++layer) {
    group->add_parameter_names(absl::StrCat("layer", layer, ".weight"));
  }
  std::vector<RemoteLocalSgd> local_sgd;
  for (const std::string& address : ranks.addresses) {
    local_sgd.emplace_back(&client, address);
  }
  if (!OnEveryRank([&](int r) { return local_sgd[r].Create(spec).status(); })) {
    return {};
  }
  std::vector<double> seconds;
  for (int s = 0; s < kSteps; ++s) {
    bool stepped = false;
    seconds.push_back(SecondsOf([&] {
      stepped = OnEveryRank(
          [&](int r) { return local_sgd[r].Step(ranks.context_id).status(); });
    }));
    if (!stepped) return {};
  }
  return seconds;
}

void Run() {
  Client client;
  const auto torch = TorchPeer();
  const double model_mib =
      static_cast<double>(kLayers) * kSize * kSize * 4 / (1 << 20);

  // Period 2, no gradient reduction: even steps average, odd ones do not.
  v1::CreatePostLocalSgdRequest alternate;
  alternate.mutable_periodic()->set_period(2);
  alternate.set_no_post_local_gradient_allreduce(true);
  const std::vector<double> alternating = StepTimes(client, alternate);
  // Gradients all-reduced at every step, never averaged: data parallelism.
  v1::CreatePostLocalSgdRequest every_step;
  every_step.mutable_periodic()->set_period(1000000);
  every_step.mutable_periodic()->set_warmup_steps(1000000);
  every_step.set_start_localsgd_iter(1000000);
  const std::vector<double> reducing = StepTimes(client, every_step);
  // Post-local SGD with period 4.
  v1::CreatePostLocalSgdRequest period4;
  period4.mutable_periodic()->set_period(4);
  period4.set_no_post_local_gradient_allreduce(true);
  const std::vector<double> local = StepTimes(client, period4);
  if (alternating.empty() || reducing.empty() || local.empty()) return;

  std::vector<double> averaging_steps, plain_steps;
  for (int s = 2; s < kSteps; ++s) {  // Two warm-up steps.
    (s % 2 == 0 ? averaging_steps : plain_steps).push_back(alternating[s]);
  }
  const double averaging = Median(averaging_steps) - Median(plain_steps);
  std::printf("model: %d x %lld x %lld fp32 (%.0f MiB), 2 ranks\n", kLayers,
              static_cast<long long>(kSize), static_cast<long long>(kSize),
              model_mib);
  std::printf(
      "distopt averaging %.3f s (step with averaging %.3f s, "
      "without %.3f s)\n",
      averaging, Median(averaging_steps), Median(plain_steps));
  auto it = torch.find("averaging");
  if (it != torch.end()) {
    std::printf(
        "torch   PeriodicModelAverager.average_parameters %.3f s: "
        "torch/distopt %.2fx (goal > 1)\n",
        it->second, it->second / averaging);
  } else {
    std::printf("torch: not available (set DISTOPT_TORCH_PYTHON)\n");
  }
  // Four steps from step 4 on (warm-up done): steps 4..7 and 8..11.
  double four_reducing = 0, four_local = 0;
  for (int s = 4; s < 8; ++s) {
    four_reducing += reducing[s];
    four_local += local[s];
  }
  std::printf(
      "4 steps with a gradient all-reduce each: %.3f s, %.0f MiB "
      "all-reduced per rank\n",
      four_reducing, 4 * model_mib);
  std::printf(
      "4 steps of post-local SGD, period 4:     %.3f s, %.0f MiB "
      "all-reduced per rank (saves %.0f%% of the bytes, %.3f s)\n",
      four_local, model_mib, 75.0, four_reducing - four_local);
  auto reduce = torch.find("gradient_allreduce");
  if (reduce != torch.end()) {
    std::printf("torch   one flat gradient all-reduce %.3f s (x4 = %.3f s)\n",
                reduce->second, 4 * reduce->second);
  }
}

}  // namespace
}  // namespace distopt

int main() {
  distopt::Run();
  return 0;
}
