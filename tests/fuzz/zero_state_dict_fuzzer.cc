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
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/distopt/v1/zero.pb.h"
#include "server/optim/wire_optimizer.h"
#include "server/zero/zero_optimizer.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/model_tensors.h"
#include "tests/fuzz/state_dict_protos.h"

namespace {

using namespace distopt;  // NOLINT

// The mirror optimizer, over tensors of its own: the model's layout,
// values of its own.
struct MirrorModel {
  GroupGradientPointers Grads() {
    return tensors.GroupGrads(fuzz::ModelZeroSpec().groups);
  }

  fuzz::ModelTensors tensors{/*gradient_byte=*/0x3b};
  fuzz::MirrorCommunicator communicator{0, 2};
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
  absl::StatusOr<v1::ZeroStateDict> dict = fuzz::GetZeroStateDict(f.daemon);
  fuzz::CheckOk(dict.status(), "GetZeroStateDict");
  return *std::move(dict);
}

v1::OptimizerStateDict MirrorShard(Fixture& f) {
  return fuzz::CheckedStateDictProto(f.mirror.optimizer->ShardStateDict(),
                                     "ShardStateDict");
}

// The runner in a group of one and the mirror optimizer, each stepped
// twice.
void SetUp(Fixture& f) {
  fuzz::CheckOk(f.daemon.CreateModelInGroupOfOne(), "CreateModelInGroupOfOne");
  fuzz::CheckOk(f.daemon.CreateZero(), "CreateZero");
  fuzz::CheckOk(f.daemon.StepEverythingTimes(2), "StepEverythingTimes");
  f.original = RunnerDict(f);

  const ZeroSpec spec = fuzz::ModelZeroSpec();
  absl::StatusOr<std::unique_ptr<ZeroOptimizer>> mirror = ZeroOptimizer::Create(
      &f.mirror.communicator, f.mirror.kinds->Find(spec.kind).value(),
      spec.kind, f.mirror.tensors.Groups(spec.groups));
  fuzz::CheckOk(mirror.status(), "ZeroOptimizer::Create (mirror)");
  f.mirror.optimizer = *std::move(mirror);
  fuzz::CheckOk(f.mirror.optimizer->Step(f.mirror.Grads()), "mirror step");
  fuzz::CheckOk(f.mirror.optimizer->Step(f.mirror.Grads()), "mirror step");
  f.mirror_original = MirrorShard(f);
}

void FuzzRunner(Fixture& f, const v1::ZeroStateDict& request) {
  const absl::Status loaded = fuzz::LoadZeroStateDict(f.daemon, request);
  fuzz::Report("ZeroRunner::LoadStateDict", loaded);
  if (!loaded.ok()) {
    fuzz::CheckSameMessage(
        RunnerDict(f), f.original,
        absl::StrCat("a refused ZeRO load (", loaded.ToString(),
                     ") changed the state"));
    return;
  }
  (void)RunnerDict(f);
  fuzz::CheckOk(fuzz::LoadZeroStateDict(f.daemon, f.original),
                "loading the saved ZeRO dict back");
  fuzz::CheckSameMessage(RunnerDict(f), f.original,
                         "the saved ZeRO dict does not load back");
}

void FuzzMirror(Fixture& f, const v1::ZeroStateDict& request) {
  ZeroOptimizer& optimizer = *f.mirror.optimizer;
  const absl::Status loaded =
      optimizer.LoadStateDict(StateDictFromProto(request.state_dict()),
                              ZeroOptimizer::Given::kTheSameOnEveryRank);
  fuzz::Report("ZeroOptimizer::LoadStateDict (rank 0 of 2)", loaded);
  if (!loaded.ok()) {
    fuzz::CheckSameMessage(
        MirrorShard(f), f.mirror_original,
        absl::StrCat("a refused ZeRO load (", loaded.ToString(),
                     ") changed rank 0's share"));
    return;
  }
  fuzz::CheckOk(optimizer.Step(f.mirror.Grads()), "a step after loading");
  (void)MirrorShard(f);
  // The shard at global positions, with the param groups: loads whole.
  absl::StatusOr<OptimizerStateDict> back =
      StateDictFromProto(f.mirror_original);
  fuzz::CheckOk(back.status(), "StateDictFromProto of the saved shard");
  fuzz::CheckOk(
      optimizer.LoadStateDict(*back, ZeroOptimizer::Given::kTheSameOnEveryRank),
      "loading the shard back");
  fuzz::CheckSameMessage(MirrorShard(f), f.mirror_original,
                         "rank 0's saved share does not load back");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = fuzz::TargetFixture(SetUp);
  v1::ZeroStateDict request;
  if (!fuzz::Parse(data, size, &request)) return 0;
  FuzzRunner(f, request);
  FuzzMirror(f, request);
  return 0;
}
