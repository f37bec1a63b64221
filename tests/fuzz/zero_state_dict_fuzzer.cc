// ZeRO state dicts loaded as ZeroService.LoadStateDict does once the chunks
// are read: StateDictFromProto (a dict that does not convert still goes to
// the collective, as its error), then ZeroRunner::LoadStateDict (names to
// positions, the parameters' locks, the group's collectives) ->
// ZeroOptimizer::LoadStateDict (SplitStateDict, LoadAllOrNothing).
//
// Two optimizers over the model of fuzz_support.h, both stepped twice:
//  - the daemon's ZeroRunner, in a data-parallel group of one rank (gloo
//    over loopback), holding all of the state;
//  - a ZeroOptimizer as rank 0 of 2 (MirrorCommunicator), holding a share
//    of it, over tensors of its own, loaded with the same dict (positions
//    as they are: the runner's name mapping is not applied).
// The input is a serialized v1::ZeroStateDict. A refused load must leave
// the state as it was; after an accepted one the saved dict must load back
// to the same state; the mirror optimizer also steps with the loaded state.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "proto/distopt/v1/zero.pb.h"
#include "server/optim/wire_optimizer.h"
#include "server/zero/zero_optimizer.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace distopt;  // NOLINT

// The mirror optimizer's tensors: the model's layout, values of its own.
struct MirrorModel {
  explicit MirrorModel() : communicator(0, 2) {
    for (const CreateParameterSpec& spec : fuzz::ModelParameters()) {
      tensors.push_back(Tensor::AllocateHost(spec.dtype, spec.shape).value());
      std::memset(tensors.back().data(), 0x3c, tensors.back().byte_size());
      grads.push_back(Tensor::AllocateHost(spec.dtype, spec.shape).value());
      std::memset(grads.back().data(), 0x3b, grads.back().byte_size());
    }
  }
  std::vector<ParamGroup> Groups() {
    const ZeroSpec spec = fuzz::ModelZeroSpec();
    std::vector<ParamGroup> groups(2);
    groups[0].hyperparameters = spec.groups[0].hyperparameters;
    groups[0].params = {&tensors[0], &tensors[1]};
    groups[1].hyperparameters = spec.groups[1].hyperparameters;
    groups[1].params = {&tensors[2], &tensors[3], &tensors[4]};
    return groups;
  }
  GroupGradientPointers Grads() {
    return {{&grads[0], nullptr}, {&grads[2], &grads[3], &grads[4]}};
  }

  std::vector<Tensor> tensors;
  std::vector<Tensor> grads;
  fuzz::MirrorCommunicator communicator;
  std::unique_ptr<OptimizerRegistry> kinds = OptimizerRegistry::WithBuiltins();
  std::unique_ptr<ZeroOptimizer> optimizer;
};

struct Fixture {
  fuzz::Daemon daemon;
  v1::ZeroStateDict original;  // The runner's, consolidated.
  MirrorModel mirror;
  v1::OptimizerStateDict mirror_original;  // The mirror's shard.
};

v1::ZeroStateDict RunnerDict(Fixture& f) {
  absl::StatusOr<bool> holds = f.daemon.zero.ConsolidateStateDict(0);
  fuzz::CheckOk(holds.status(), "ConsolidateStateDict");
  absl::StatusOr<NamedStateDict> named = f.daemon.zero.GetStateDict();
  fuzz::CheckOk(named.status(), "GetStateDict");
  // As ZeroServiceImpl::GetStateDict.
  v1::ZeroStateDict proto;
  StateDictToProto(named->state_dict, proto.mutable_state_dict());
  proto.mutable_parameter_names()->Assign(named->parameter_names.begin(),
                                          named->parameter_names.end());
  return proto;
}

v1::OptimizerStateDict MirrorShard(Fixture& f) {
  absl::StatusOr<OptimizerStateDict> shard =
      f.mirror.optimizer->ShardStateDict();
  fuzz::CheckOk(shard.status(), "ShardStateDict");
  v1::OptimizerStateDict proto;
  StateDictToProto(*shard, &proto);
  return proto;
}

// As ZeroServiceImpl::LoadStateDict, after ReadRequestChunked.
absl::StatusOr<NamedStateDict> Convert(const v1::ZeroStateDict& request) {
  absl::StatusOr<OptimizerStateDict> dict =
      StateDictFromProto(request.state_dict());
  if (!dict.ok()) return dict.status();
  NamedStateDict result;
  result.state_dict = *std::move(dict);
  result.parameter_names.assign(request.parameter_names().begin(),
                                request.parameter_names().end());
  return result;
}

Fixture& GetFixture() {
  static Fixture* fixture = [] {
    fuzz::LimitMemoryOnce();
    auto* f = new Fixture;
    fuzz::CheckOk(f->daemon.CreateModel(), "CreateModel");
    fuzz::CheckOk(f->daemon.JoinGroupOfOne(), "JoinGroupOfOne");
    fuzz::CheckOk(f->daemon.zero.Create(fuzz::ModelZeroSpec()).status(),
                  "ZeroRunner::Create");
    f->daemon.zero_made = true;
    fuzz::CheckOk(f->daemon.StepEverything(1, 1), "first step");
    fuzz::CheckOk(f->daemon.StepEverything(2, 2), "second step");
    f->original = RunnerDict(*f);

    const ZeroSpec spec = fuzz::ModelZeroSpec();
    absl::StatusOr<std::unique_ptr<ZeroOptimizer>> mirror =
        ZeroOptimizer::Create(&f->mirror.communicator,
                              f->mirror.kinds->Find(spec.kind).value(),
                              spec.kind, f->mirror.Groups());
    fuzz::CheckOk(mirror.status(), "ZeroOptimizer::Create (mirror)");
    f->mirror.optimizer = *std::move(mirror);
    fuzz::CheckOk(f->mirror.optimizer->Step(f->mirror.Grads()), "mirror step");
    fuzz::CheckOk(f->mirror.optimizer->Step(f->mirror.Grads()), "mirror step");
    f->mirror_original = MirrorShard(*f);
    return f;
  }();
  return *fixture;
}

void FuzzRunner(Fixture& f, const v1::ZeroStateDict& request) {
  const absl::Status loaded = f.daemon.zero.LoadStateDict(Convert(request));
  fuzz::Report("ZeroRunner::LoadStateDict", loaded);
  if (!loaded.ok()) {
    if (!fuzz::SameMessage(RunnerDict(f), f.original)) {
      std::fprintf(stderr, "a refused ZeRO load (%s) changed the state\n",
                   loaded.ToString().c_str());
      std::abort();
    }
    return;
  }
  (void)RunnerDict(f);
  fuzz::CheckOk(f.daemon.zero.LoadStateDict(Convert(f.original)),
                "loading the saved ZeRO dict back");
  if (!fuzz::SameMessage(RunnerDict(f), f.original)) {
    std::fprintf(stderr, "the saved ZeRO dict does not load back\n");
    std::abort();
  }
}

void FuzzMirror(Fixture& f, const v1::ZeroStateDict& request) {
  ZeroOptimizer& optimizer = *f.mirror.optimizer;
  const absl::Status loaded =
      optimizer.LoadStateDict(StateDictFromProto(request.state_dict()));
  fuzz::Report("ZeroOptimizer::LoadStateDict (rank 0 of 2)", loaded);
  if (!loaded.ok()) {
    if (!fuzz::SameMessage(MirrorShard(f), f.mirror_original)) {
      std::fprintf(stderr, "a refused ZeRO load (%s) changed rank 0's share\n",
                   loaded.ToString().c_str());
      std::abort();
    }
    return;
  }
  fuzz::CheckOk(optimizer.Step(f.mirror.Grads()), "a step after loading");
  (void)MirrorShard(f);
  // The shard at global positions, with the param groups: loads whole.
  absl::StatusOr<OptimizerStateDict> back =
      StateDictFromProto(f.mirror_original);
  fuzz::CheckOk(back.status(), "StateDictFromProto of the saved shard");
  fuzz::CheckOk(optimizer.LoadStateDict(*back), "loading the shard back");
  if (!fuzz::SameMessage(MirrorShard(f), f.mirror_original)) {
    std::fprintf(stderr, "rank 0's saved share does not load back\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = GetFixture();
  v1::ZeroStateDict request;
  if (!fuzz::Parse(absl::string_view(reinterpret_cast<const char*>(data), size),
                   &request)) {
    return 0;
  }
  FuzzRunner(f, request);
  FuzzMirror(f, request);
  return 0;
}
