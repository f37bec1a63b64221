// Post-local SGD state dicts loaded as LocalSgdService.LoadStateDict does
// once the chunks are read: StateDictFromProto, then
// LocalSgdRunner::LoadStateDict -> LocalSgdOptimizer::LoadStateDict (the
// averager's step; SplitStateDict, LoadAllOrNothing), then what Get reports
// (the next averaging, computed from the loaded step).
//
// The daemon's LocalSgdRunner runs over the model of fuzz_support.h in a
// data-parallel group of one rank (gloo over loopback), stepped three
// times. The input is a serialized v1::PostLocalSgdStateDict. A refused load
// must leave the state dict and the step as they were; after an accepted
// one the saved dict must load back to the same. An accepted dict is also
// loaded into a LocalSgdOptimizer over tensors of its own (rank 0 of 2 mirror
// ranks), which then steps: a loaded step and state must be safe to step
// with.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proto/distopt/v1/local_sgd.pb.h"
#include "server/localsgd/local_sgd_optimizer.h"
#include "server/optim/wire_optimizer.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace distopt;  // NOLINT

struct Fixture {
  fuzz::Daemon daemon;
  v1::PostLocalSgdStateDict original;
};

v1::PostLocalSgdStateDict RunnerDict(Fixture& f) {
  auto dict = f.daemon.local_sgd.GetStateDict();
  fuzz::CheckOk(dict.status(), "GetStateDict");
  // As LocalSgdServiceImpl::GetStateDict.
  v1::PostLocalSgdStateDict proto;
  StateDictToProto(dict->first, proto.mutable_state_dict());
  proto.set_step(dict->second);
  return proto;
}

Fixture& GetFixture() {
  static Fixture* fixture = [] {
    fuzz::LimitMemoryOnce();
    auto* f = new Fixture;
    fuzz::CheckOk(f->daemon.CreateModel(), "CreateModel");
    fuzz::CheckOk(f->daemon.JoinGroupOfOne(), "JoinGroupOfOne");
    fuzz::CheckOk(
        f->daemon.local_sgd.Create(fuzz::ModelLocalSgdSpec()).status(),
        "LocalSgdRunner::Create");
    f->daemon.local_sgd_made = true;
    for (int step = 1; step <= 3; ++step) {
      fuzz::CheckOk(f->daemon.StepEverything(step, step), "a step");
    }
    f->original = RunnerDict(*f);
    return f;
  }();
  return *fixture;
}

// As LocalSgdServiceImpl::LoadStateDict, after ReadRequestChunked.
absl::Status Load(Fixture& f, const v1::PostLocalSgdStateDict& request) {
  absl::StatusOr<OptimizerStateDict> dict =
      StateDictFromProto(request.state_dict());
  if (!dict.ok()) return dict.status();
  absl::StatusOr<std::vector<std::string>> warnings =
      f.daemon.local_sgd.LoadStateDict(
          *dict, request.has_step() ? std::optional<int64_t>(request.step())
                                    : std::nullopt);
  return warnings.status();
}

// Loads the dict into a LocalSgdOptimizer of the same spec over tensors of
// its own (rank 0 of 2), and steps it.
void StepWithLoadedState(const v1::PostLocalSgdStateDict& request) {
  const LocalSgdSpec spec = fuzz::ModelLocalSgdSpec();
  std::vector<Tensor> tensors;
  std::vector<Tensor> grads;
  for (const CreateParameterSpec& p : fuzz::ModelParameters()) {
    tensors.push_back(Tensor::AllocateHost(p.dtype, p.shape).value());
    std::memset(tensors.back().data(), 0x3c, tensors.back().byte_size());
    grads.push_back(Tensor::AllocateHost(p.dtype, p.shape).value());
    std::memset(grads.back().data(), 0x3b, grads.back().byte_size());
  }
  std::vector<ParamGroup> groups(2);
  groups[0].hyperparameters = spec.groups[0].hyperparameters;
  groups[0].params = {&tensors[0], &tensors[1]};
  groups[1].hyperparameters = spec.groups[1].hyperparameters;
  groups[1].params = {&tensors[2], &tensors[3], &tensors[4]};
  fuzz::MirrorCommunicatorGroup group(0, 2);
  std::unique_ptr<OptimizerRegistry> kinds = OptimizerRegistry::WithBuiltins();
  std::vector<std::string> warnings;
  absl::StatusOr<std::unique_ptr<LocalSgdOptimizer>> optimizer =
      LocalSgdOptimizer::Create(group, kinds->Find(spec.kind).value(),
                                spec.kind, groups, spec.options, &warnings);
  fuzz::CheckOk(optimizer.status(), "LocalSgdOptimizer::Create (mirror)");
  absl::StatusOr<OptimizerStateDict> dict =
      StateDictFromProto(request.state_dict());
  fuzz::CheckOk(dict.status(), "StateDictFromProto");
  fuzz::CheckOk((*optimizer)
                    ->LoadStateDict(*dict,
                                    request.has_step()
                                        ? std::optional<int64_t>(request.step())
                                        : std::nullopt,
                                    &warnings),
                "LoadStateDict of a dict the runner accepted");
  const GroupGradientPointers grad_pointers = {
      {&grads[0], nullptr}, {&grads[2], &grads[3], &grads[4]}};
  const int64_t loaded_step = (*optimizer)->step();
  for (int step = 0; step < 2; ++step) {
    fuzz::CheckOk((*optimizer)->Step(group, grad_pointers),
                  "a step after loading");
  }
  // The averager's step only counts up; what the optimizer then holds
  // loads again (as a checkpoint saves and restores it).
  if ((*optimizer)->step() < loaded_step) {
    std::fprintf(stderr, "the averager's step went from %lld to %lld\n",
                 static_cast<long long>(loaded_step),
                 static_cast<long long>((*optimizer)->step()));
    std::abort();
  }
  absl::StatusOr<OptimizerStateDict> stepped = (*optimizer)->StateDict();
  fuzz::CheckOk(stepped.status(), "StateDict after a step");
  fuzz::CheckOk(
      (*optimizer)->LoadStateDict(*stepped, (*optimizer)->step(), &warnings),
      "loading the state dict of a step after loading");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = GetFixture();
  v1::PostLocalSgdStateDict request;
  if (!fuzz::Parse(absl::string_view(reinterpret_cast<const char*>(data), size),
                   &request)) {
    return 0;
  }
  const absl::Status loaded = Load(f, request);
  fuzz::Report("LocalSgdRunner::LoadStateDict", loaded);
  if (!loaded.ok()) {
    if (!fuzz::SameMessage(RunnerDict(f), f.original)) {
      std::fprintf(stderr, "a refused load (%s) changed the state\n",
                   loaded.ToString().c_str());
      std::abort();
    }
    return 0;
  }
  // What LocalSgdService.Get reports: the next averaging, at or after the
  // step.
  absl::StatusOr<LocalSgdInfo> info = f.daemon.local_sgd.Get();
  fuzz::CheckOk(info.status(), "Get");
  if (info->next_averaging.step < info->step) {
    std::fprintf(stderr, "next averaging at step %lld, before step %lld\n",
                 static_cast<long long>(info->next_averaging.step),
                 static_cast<long long>(info->step));
    std::abort();
  }
  (void)RunnerDict(f);
  StepWithLoadedState(request);
  fuzz::CheckOk(Load(f, f.original), "loading the saved dict back");
  if (!fuzz::SameMessage(RunnerDict(f), f.original)) {
    std::fprintf(stderr, "the saved dict does not load back\n");
    std::abort();
  }
  return 0;
}
