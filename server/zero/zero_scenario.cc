#include "server/zero/zero_scenario.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <thread>

#include "common/cpu_backend.h"
#include "gtest/gtest.h"
#include "server/comm/paired_communicator.h"
#include "server/comm/staged_communicator.h"
#include "server/comm/testing/gloo_test_ranks.h"
#include "server/optim/functional_optimizer.h"
#include "server/optim/registry.h"
#include "server/zero/zero_optimizer.h"

namespace distopt {
namespace zero_testing {
namespace {

int DataSteps(const Scenario& scenario, int rank) {
  return scenario.data_steps.empty() ? scenario.steps
                                     : scenario.data_steps[rank];
}

bool GroupExists(const Scenario& scenario, size_t g, int step) {
  return !(scenario.add_last_group_at >= 0 && g + 1 == scenario.groups.size() &&
           step < scenario.add_last_group_at);
}

void RunReference(const Scenario& scenario, const OptimizerKind* kind,
                  Outcome& outcome) {
  std::vector<std::unique_ptr<FunctionalOptimizer>> local;
  outcome.reference.resize(scenario.groups.size());
  for (size_t g = 0; g < scenario.groups.size(); ++g) {
    std::vector<ParameterLayout> layouts;
    for (size_t i = 0; i < scenario.groups[g].size(); ++i) {
      const ParamSpec& spec = scenario.groups[g][i];
      outcome.reference[g].push_back(Initial(g, i, spec));
      layouts.push_back({spec.dtype, spec.shape});
    }
    auto optimizer =
        FunctionalOptimizer::Create(kind, scenario.hyperparameters[g], layouts);
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    local.push_back(*std::move(optimizer));
  }
  for (int s = 0; s < scenario.steps; ++s) {
    for (size_t g = 0; g < scenario.groups.size(); ++g) {
      if (!GroupExists(scenario, g, s)) continue;
      std::vector<std::optional<Tensor>> averaged(scenario.groups[g].size());
      std::vector<Tensor*> params;
      std::vector<const Tensor*> grads;
      for (size_t i = 0; i < scenario.groups[g].size(); ++i) {
        const ParamSpec& spec = scenario.groups[g][i];
        std::vector<float> sum(NumElements(spec.shape), 0.0f);
        bool any = false;
        for (int r = 0; r < scenario.world; ++r) {
          if (s >= DataSteps(scenario, r) ||
              !scenario.has_gradient(s, r, g, i)) {
            continue;
          }
          any = true;
          std::vector<float> mine =
              ToFloats(scenario.gradient(g, i, s, r, spec));
          for (size_t e = 0; e < sum.size(); ++e) sum[e] += mine[e];
        }
        const float scale = 1.0f / static_cast<float>(scenario.world);
        for (float& x : sum) x *= scale;
        if (any) averaged[i] = FromFloats(sum, spec);
        params.push_back(&outcome.reference[g][i]);
        grads.push_back(any ? &*averaged[i] : nullptr);
      }
      absl::Status status = local[g]->Step(params, grads);
      ASSERT_TRUE(status.ok()) << status;
    }
  }
  for (const auto& optimizer : local) {
    for (size_t i = 0; i < optimizer->parameters().size(); ++i) {
      int64_t bytes = 0;
      for (const auto& [name, buffer] : optimizer->state(i).buffers) {
        bytes += buffer.byte_size();
      }
      outcome.reference_state_bytes += bytes;
      outcome.largest_parameter_state =
          std::max(outcome.largest_parameter_state, bytes);
    }
  }
}

void RunRank(const Scenario& scenario, const OptimizerKind* kind,
             Communicator& communicator, Outcome& outcome) {
  const int r = communicator.rank();
  std::vector<std::vector<Tensor>>& params = outcome.ranks[r];
  params.resize(scenario.groups.size());
  std::vector<ParamGroup> groups(scenario.groups.size());
  for (size_t g = 0; g < scenario.groups.size(); ++g) {
    for (size_t i = 0; i < scenario.groups[g].size(); ++i) {
      params[g].push_back(Initial(g, i, scenario.groups[g][i]));
    }
    groups[g].hyperparameters = scenario.hyperparameters[g];
    for (Tensor& p : params[g]) groups[g].params.push_back(&p);
  }
  const bool adds_later = scenario.add_last_group_at >= 0;
  std::optional<ParamGroup> later;
  if (adds_later) {
    later = groups.back();
    groups.pop_back();
  }
  auto zero = ZeroOptimizer::Create(&communicator, kind, scenario.kind, groups,
                                    scenario.options);
  ASSERT_TRUE(zero.ok()) << zero.status();
  for (int s = 0; s < DataSteps(scenario, r); ++s) {
    if (adds_later && s == scenario.add_last_group_at) {
      absl::Status added = (*zero)->AddParamGroup(*later);
      ASSERT_TRUE(added.ok()) << added;
    }
    std::vector<std::vector<Tensor>> grads(scenario.groups.size());
    std::vector<std::vector<const Tensor*>> pointers;
    for (size_t g = 0; g < scenario.groups.size(); ++g) {
      if (!GroupExists(scenario, g, s)) continue;
      pointers.emplace_back();
      for (size_t i = 0; i < scenario.groups[g].size(); ++i) {
        grads[g].push_back(
            scenario.gradient(g, i, s, r, scenario.groups[g][i]));
      }
      for (size_t i = 0; i < scenario.groups[g].size(); ++i) {
        pointers.back().push_back(
            scenario.has_gradient(s, r, g, i) ? &grads[g][i] : nullptr);
      }
    }
    absl::Status status = (*zero)->Step(pointers);
    ASSERT_TRUE(status.ok()) << "rank " << r << " step " << s << ": " << status;
  }
  if (!scenario.data_steps.empty()) {
    int64_t shadowed = 0;
    while (true) {
      absl::StatusOr<bool> more = (*zero)->ShadowStep();
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
      ++shadowed;
    }
    outcome.shadowed_steps[r] = shadowed;
  }
  outcome.state_bytes[r] = (*zero)->state_bytes();
  outcome.scratch_bytes[r] = (*zero)->scratch_bytes();
}

}  // namespace

void OnRanks(int world, const std::function<void(Communicator&)>& body) {
  OnGlooRanks(world, body);
}

Outcome Run(const Scenario& scenario) {
  auto registry = OptimizerRegistry::WithBuiltins();
  const OptimizerKind* kind = *registry->Find(scenario.kind);
  Outcome outcome;
  RunReference(scenario, kind, outcome);
  outcome.ranks.resize(scenario.world);
  outcome.state_bytes.resize(scenario.world);
  outcome.scratch_bytes.resize(scenario.world);
  outcome.shadowed_steps.resize(scenario.world);
  outcome.control_bytes.resize(scenario.world);
  OnRanks(scenario.world, [&](Communicator& communicator) {
    if (scenario.staged_chunk_bytes == 0) {
      RunRank(scenario, kind, communicator, outcome);
      return;
    }
    CountingCommunicator control(communicator);
    PairedCommunicator paired(
        &control, CreateStagedCommunicator(&communicator, CpuBackend(),
                                           scenario.staged_chunk_bytes));
    RunRank(scenario, kind, paired, outcome);
    outcome.control_bytes[communicator.rank()] =
        control.all_reduce_bytes + control.reduce_scatter_bytes +
        control.all_gather_bytes + control.broadcast_bytes;
  });
  return outcome;
}

}  // namespace zero_testing
}  // namespace distopt
