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
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/cpu_backend.h"
#include "proto/distopt/v1/optimizer.pb.h"
#include "server/optim/wire_optimizer.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace distopt;  // NOLINT

struct Fixture {
  fuzz::Daemon daemon;
  // Each optimizer's state dict as the setup left it, by id.
  std::map<uint64_t, v1::OptimizerStateDict> original;
};

v1::OptimizerStateDict CurrentDict(Fixture& f, uint64_t id) {
  absl::StatusOr<OptimizerStateDict> dict =
      f.daemon.optimizers.GetStateDict(id);
  fuzz::CheckOk(dict.status(), "GetStateDict");
  v1::OptimizerStateDict proto;
  StateDictToProto(*dict, &proto);
  return proto;
}

Fixture& GetFixture() {
  static Fixture* fixture = [] {
    fuzz::LimitMemoryOnce();
    auto* f = new Fixture;
    fuzz::CheckOk(f->daemon.CreateModel(), "CreateModel");
    fuzz::CheckOk(f->daemon.CreateTableOptimizers(), "CreateTableOptimizers");
    fuzz::CheckOk(f->daemon.StepEverything(1, 1), "first step");
    fuzz::CheckOk(f->daemon.StepEverything(2, 2), "second step");
    for (const OptimizerInfo& info : f->daemon.optimizers.List()) {
      f->original[info.id] = CurrentDict(*f, info.id);
    }
    return f;
  }();
  return *fixture;
}

// Loads `dict` into a fresh optimizer like table optimizer `id` over tensors
// of its own, and steps it.
void StepWithLoadedState(uint64_t id, const OptimizerStateDict& dict) {
  const std::vector<fuzz::TableOptimizerSpec> specs = fuzz::TableOptimizers();
  if (id == 0 || id > specs.size()) return;
  const fuzz::TableOptimizerSpec& spec = specs[id - 1];
  const std::vector<CreateParameterSpec> model = fuzz::ModelParameters();
  std::vector<ParameterLayout> layouts;
  std::vector<Tensor> params;
  std::vector<Tensor> grads;
  for (uint64_t parameter : spec.parameter_ids) {
    const CreateParameterSpec& p = model[parameter - 1];
    layouts.push_back({p.dtype, p.shape});
    params.push_back(Tensor::AllocateHost(p.dtype, p.shape).value());
    grads.push_back(Tensor::AllocateHost(p.dtype, p.shape).value());
    std::memset(params.back().data(), 0x3c, params.back().byte_size());
    std::memset(grads.back().data(), 0x3b, grads.back().byte_size());
  }
  std::unique_ptr<OptimizerRegistry> kinds = OptimizerRegistry::WithBuiltins();
  absl::StatusOr<std::unique_ptr<FunctionalOptimizer>> optimizer =
      FunctionalOptimizer::Create(kinds->Find(spec.kind).value(),
                                  spec.hyperparameters, layouts);
  fuzz::CheckOk(optimizer.status(), "FunctionalOptimizer::Create");
  // The table accepted it for the same kind and layouts: so must this one.
  fuzz::CheckOk((*optimizer)->LoadStateDict(spec.kind, dict),
                "LoadStateDict of a dict the table accepted");
  std::vector<Tensor*> param_pointers;
  std::vector<const Tensor*> grad_pointers;
  for (size_t i = 0; i < params.size(); ++i) {
    param_pointers.push_back(&params[i]);
    grad_pointers.push_back(i % 2 == 0 ? &grads[i] : nullptr);
  }
  fuzz::CheckOk((*optimizer)->Step(param_pointers, grad_pointers),
                "a step after loading");
  // Steps only count up, and what the optimizer holds then is a state dict
  // it accepts again (as a checkpoint saves and restores it).
  for (size_t i = 0; i < params.size(); ++i) {
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
  Fixture& f = GetFixture();
  v1::LoadStateDictRequest request;
  if (!fuzz::Parse(absl::string_view(reinterpret_cast<const char*>(data), size),
                   &request)) {
    return 0;
  }
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
    if (!fuzz::SameMessage(CurrentDict(f, id), original->second)) {
      std::fprintf(stderr, "a refused load (%s) changed optimizer %llu\n",
                   loaded.ToString().c_str(),
                   static_cast<unsigned long long>(id));
      std::abort();
    }
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
  if (!fuzz::SameMessage(CurrentDict(f, id), original->second)) {
    std::fprintf(stderr, "optimizer %llu: a saved dict does not load back\n",
                 static_cast<unsigned long long>(id));
    std::abort();
  }
  return 0;
}
