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
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/distopt/v1/local_sgd.pb.h"
#include "server/localsgd/local_sgd_optimizer.h"
#include "server/optim/wire_optimizer.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/model_tensors.h"
#include "tests/fuzz/state_dict_protos.h"

namespace {

using namespace distopt;  // NOLINT

struct Fixture {
  fuzz::Daemon daemon;
  v1::PostLocalSgdStateDict original;
};

v1::PostLocalSgdStateDict RunnerDict(Fixture& f) {
  absl::StatusOr<v1::PostLocalSgdStateDict> dict =
      fuzz::GetLocalSgdStateDict(f.daemon);
  fuzz::CheckOk(dict.status(), "GetLocalSgdStateDict");
  return *std::move(dict);
}

// The runner in a group of one, stepped three times.
void SetUp(Fixture& f) {
  fuzz::CheckOk(f.daemon.CreateModelInGroupOfOne(), "CreateModelInGroupOfOne");
  fuzz::CheckOk(f.daemon.CreateLocalSgd(), "CreateLocalSgd");
  fuzz::CheckOk(f.daemon.StepEverythingTimes(3), "StepEverythingTimes");
  f.original = RunnerDict(f);
}

// Loads the dict into a LocalSgdOptimizer of the same spec over tensors of
// its own (rank 0 of 2), and steps it.
void StepWithLoadedState(const v1::PostLocalSgdStateDict& request) {
  const LocalSgdSpec spec = fuzz::ModelLocalSgdSpec();
  fuzz::ModelTensors tensors(/*gradient_byte=*/0x3b);
  fuzz::MirrorCommunicatorGroup group(0, 2);
  std::unique_ptr<OptimizerRegistry> kinds = OptimizerRegistry::WithBuiltins();
  std::vector<std::string> warnings;
  absl::StatusOr<std::unique_ptr<LocalSgdOptimizer>> optimizer =
      LocalSgdOptimizer::Create(group, kinds->Find(spec.kind).value(),
                                spec.kind, tensors.Groups(spec.groups),
                                spec.options, &warnings);
  fuzz::CheckOk(optimizer.status(), "LocalSgdOptimizer::Create (mirror)");
  absl::StatusOr<OptimizerStateDict> dict =
      StateDictFromProto(request.state_dict());
  fuzz::CheckOk(dict.status(), "StateDictFromProto");
  fuzz::CheckOk(
      (*optimizer)->LoadStateDict(*dict, fuzz::LoadedStep(request), &warnings),
      "LoadStateDict of a dict the runner accepted");
  const GroupGradientPointers grad_pointers = tensors.GroupGrads(spec.groups);
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
  Fixture& f = fuzz::TargetFixture(SetUp);
  v1::PostLocalSgdStateDict request;
  if (!fuzz::Parse(data, size, &request)) return 0;
  const absl::Status loaded = fuzz::LoadLocalSgdStateDict(f.daemon, request);
  fuzz::Report("LocalSgdRunner::LoadStateDict", loaded);
  if (!loaded.ok()) {
    fuzz::CheckSameMessage(RunnerDict(f), f.original,
                           absl::StrCat("a refused load (", loaded.ToString(),
                                        ") changed the state"));
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
  fuzz::CheckOk(fuzz::LoadLocalSgdStateDict(f.daemon, f.original),
                "loading the saved dict back");
  fuzz::CheckSameMessage(RunnerDict(f), f.original,
                         "the saved dict does not load back");
  return 0;
}
