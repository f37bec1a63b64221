// Optimizer state dicts loaded into the optimizers of a daemon's table, as
// OptimizerService.LoadStateDict does once the chunks are read (see
// chunked_message_fuzzer): StateDictFromProto, then
// OptimizerTable::LoadStateDict -> FunctionalOptimizer::LoadStateDict.
//
// The daemon holds the model (tests/fuzz/fuzz_support.h) and one optimizer
// of every built-in kind (ids 1 to 8), each stepped twice so that it has
// state. The input is a serialized v1::LoadStateDictRequest (optimizer_id
// picks the optimizer). A refused load must leave the optimizer's state
// dict as it was; after an accepted one, the old dict must load back and
// give the same state dict again. An accepted dict is also loaded into a
// fresh optimizer of the same kind over tensors of its own, which then
// steps: loaded state must be safe to step with.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cpu_backend.h"
#include "proto/distopt/v1/optimizer.pb.h"
#include "server/optim/wire_optimizer.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/model_tensors.h"
#include "tests/fuzz/state_dict_protos.h"

namespace {

using namespace distopt;  // NOLINT

struct Fixture {
  fuzz::Daemon daemon;
  // Each optimizer's state dict as the setup left it, by id.
  std::map<uint64_t, v1::OptimizerStateDict> original;
};

v1::OptimizerStateDict CurrentDict(Fixture& f, uint64_t id) {
  return fuzz::CheckedStateDictProto(f.daemon.optimizers.GetStateDict(id),
                                     "GetStateDict");
}

// The table's optimizers, each stepped twice so that it has state.
void SetUp(Fixture& f) {
  fuzz::CheckOk(f.daemon.CreateModel(), "CreateModel");
  fuzz::CheckOk(f.daemon.CreateTableOptimizers(), "CreateTableOptimizers");
  fuzz::CheckOk(f.daemon.StepEverythingTimes(2), "StepEverythingTimes");
  for (const OptimizerInfo& info : f.daemon.optimizers.List()) {
    f.original[info.id] = CurrentDict(f, info.id);
  }
}

// Loads `dict` into a fresh optimizer like table optimizer `id` over tensors
// of its own, and steps it.
void StepWithLoadedState(uint64_t id, const OptimizerStateDict& dict) {
  const std::vector<fuzz::TableOptimizerSpec> specs = fuzz::TableOptimizers();
  if (id == 0 || id > specs.size()) return;
  const fuzz::TableOptimizerSpec& spec = specs[id - 1];
  fuzz::ModelTensors tensors(spec.parameter_ids, /*gradient_byte=*/0x3b);
  std::unique_ptr<OptimizerRegistry> kinds = OptimizerRegistry::WithBuiltins();
  absl::StatusOr<std::unique_ptr<FunctionalOptimizer>> optimizer =
      FunctionalOptimizer::Create(kinds->Find(spec.kind).value(),
                                  spec.hyperparameters, tensors.layouts());
  fuzz::CheckOk(optimizer.status(), "FunctionalOptimizer::Create");
  // The table accepted it for the same kind and layouts: so must this one.
  fuzz::CheckOk((*optimizer)->LoadStateDict(spec.kind, dict),
                "LoadStateDict of a dict the table accepted");
  // Every other parameter has no gradient (the step skips it), so that
  // loaded state meets both kinds of step.
  std::vector<const Tensor*> grads = tensors.Grads();
  for (size_t i = 1; i < grads.size(); i += 2) grads[i] = nullptr;
  fuzz::CheckOk((*optimizer)->Step(tensors.Params(), grads),
                "a step after loading");
  // Steps only count up, and what the optimizer holds then is a state dict
  // it accepts again (as a checkpoint saves and restores it).
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto loaded = dict.state.find(static_cast<int64_t>(i));
    const int64_t before =
        loaded == dict.state.end() ? 0 : loaded->second.step.value_or(0);
    if ((*optimizer)->state(i).step < before) {
      std::fprintf(stderr, "params[%zu]: step %lld after a step from %lld\n", i,
                   static_cast<long long>((*optimizer)->state(i).step),
                   static_cast<long long>(before));
      std::abort();
    }
  }
  absl::StatusOr<OptimizerStateDict> stepped =
      (*optimizer)->StateDict(spec.kind);
  fuzz::CheckOk(stepped.status(), "StateDict after a step");
  fuzz::CheckOk((*optimizer)->LoadStateDict(spec.kind, *stepped),
                "loading the state dict of a step after loading");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = fuzz::TargetFixture(SetUp);
  v1::LoadStateDictRequest request;
  if (!fuzz::Parse(data, size, &request)) return 0;
  // As OptimizerServiceImpl::LoadStateDict, after ReadRequestChunked.
  absl::StatusOr<OptimizerStateDict> dict =
      StateDictFromProto(request.state_dict());
  fuzz::Report("StateDictFromProto", dict.status());
  if (!dict.ok()) return 0;
  const uint64_t id = request.optimizer_id();
  const absl::Status loaded = f.daemon.optimizers.LoadStateDict(id, *dict);
  fuzz::Report("LoadStateDict", loaded);
  auto original = f.original.find(id);
  if (original == f.original.end()) {
    if (loaded.ok()) std::abort();  // No such optimizer.
    return 0;
  }
  if (!loaded.ok()) {
    fuzz::CheckSameMessage(CurrentDict(f, id), original->second,
                           absl::StrCat("a refused load (", loaded.ToString(),
                                        ") changed optimizer ", id));
    return 0;
  }
  (void)CurrentDict(f, id);
  StepWithLoadedState(id, *dict);
  // Back to the original state, which must load and read back the same.
  absl::StatusOr<OptimizerStateDict> back =
      StateDictFromProto(original->second);
  fuzz::CheckOk(back.status(), "StateDictFromProto of a saved dict");
  fuzz::CheckOk(f.daemon.optimizers.LoadStateDict(id, *back),
                "loading a saved dict back");
  fuzz::CheckSameMessage(
      CurrentDict(f, id), original->second,
      absl::StrCat("optimizer ", id, ": a saved dict does not load back"));
  return 0;
}
