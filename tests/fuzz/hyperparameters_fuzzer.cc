// Optimizer kinds and hyperparameters from requests: what
// OptimizerService.CreateOptimizer and SetHyperparameters do
// (HyperparametersFromProto, OptimizerTable::Create -> the registry,
// ResolveHyperparameters, OptimizerKind::Validate, the state's budget),
// the same checks for every built-in kind, a data-parallel group's
// parameter groups (NamedGroupFromProto) and their collective change
// (SetHyperparametersOnEveryRank), and a step with the values accepted.
//
// Input: a part (16-bit length, then a serialized
// v1::CreateOptimizerRequest), then the rest: a serialized
// v1::SetHyperparametersRequest (its optimizer_id is replaced by the
// created optimizer's when there is one), also tried as a
// v1::ZeroParamGroup. A refused SetHyperparameters must leave the
// optimizer's hyperparameters as they were.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/server_context.h"
#include "proto/distopt/v1/data_parallel.pb.h"
#include "proto/distopt/v1/optimizer.pb.h"
#include "server/data_parallel/collective_hyperparameters.h"
#include "server/data_parallel/named_groups_proto.h"
#include "server/optim/wire_optimizer.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/model_tensors.h"

namespace {

using namespace distopt;  // NOLINT

// The budget's use with the model alone: every optimizer an input makes is
// deleted again, and its state's reservation with it.
uint64_t ModelBytes() {
  static const uint64_t bytes = fuzz::ModelDaemon().budget.used_bytes();
  return bytes;
}

// Every built-in kind's checks on `values`, alone and over its defaults.
void CheckEveryKind(
    const OptimizerRegistry& kinds,
    const absl::flat_hash_map<std::string, HyperValue>& values) {
  for (const std::string& name : kinds.Names()) {
    const OptimizerKind* kind = kinds.Find(name).value();
    absl::StatusOr<Hyperparameters> defaults =
        ResolveHyperparameters(kind->hyperparameters(), {});
    fuzz::CheckOk(defaults.status(), "the defaults");
    fuzz::CheckOk(kind->Validate(*defaults), "the defaults' validation");
    absl::StatusOr<Hyperparameters> resolved =
        ResolveHyperparameters(kind->hyperparameters(), values, &*defaults);
    if (!resolved.ok()) continue;
    if (!kind->Validate(*resolved).ok()) continue;
    (void)kind->StateBuffers(*resolved);
    for (const auto& [key, value] : resolved->values()) {
      (void)HyperValueToString(value);
      (void)HyperValueToProto(value);
    }
  }
}

// An optimizer like the created one over tensors of its own: the changes
// made on every rank of a (mirror) group, then a step.
void StepPrivately(
    const OptimizerRegistry& kinds, const v1::OptimizerInfo& info,
    const absl::flat_hash_map<std::string, HyperValue>& changes) {
  absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> created_with =
      HyperparametersFromProto(info.hyperparameters(), "info");
  fuzz::CheckOk(created_with.status(), "the created optimizer's values");
  fuzz::ModelTensors tensors(info.parameter_ids(), /*gradient_byte=*/0xbb);
  absl::StatusOr<std::unique_ptr<FunctionalOptimizer>> optimizer =
      FunctionalOptimizer::Create(kinds.Find(info.kind()).value(),
                                  *created_with, tensors.layouts());
  fuzz::CheckOk(optimizer.status(), "an optimizer like the created one");
  fuzz::MirrorCommunicator communicator(1, 2);
  std::vector<std::unique_ptr<FunctionalOptimizer>> groups;
  groups.push_back(*std::move(optimizer));
  (void)SetHyperparametersOnEveryRank(communicator, groups, 0, changes);
  for (int step = 0; step < 2; ++step) {
    fuzz::CheckOk(groups[0]->Step(tensors.Params(), tensors.Grads()), "a step");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Daemon& daemon = fuzz::ModelDaemon();
  const uint64_t model_bytes = ModelBytes();
  fuzz::InputReader in(data, size);
  v1::CreateOptimizerRequest create;
  if (!fuzz::Parse(in.Part(), &create)) return 0;
  const absl::string_view rest = in.Rest();

  absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> values =
      HyperparametersFromProto(create.hyperparameters(), "hyperparameters");
  if (values.ok()) CheckEveryKind(*daemon.kinds, *values);

  grpc::ServerContext context;
  v1::OptimizerInfo created;
  const grpc::Status made =
      daemon.optimizer_service.CreateOptimizer(&context, &create, &created);
  fuzz::Report("CreateOptimizer", made);

  v1::SetHyperparametersRequest set;
  if (fuzz::Parse(rest, &set)) {
    if (made.ok()) set.set_optimizer_id(created.id());
    v1::OptimizerInfo before;
    v1::GetOptimizerRequest get;
    get.set_optimizer_id(set.optimizer_id());
    const bool exists =
        daemon.optimizer_service.GetOptimizer(&context, &get, &before).ok();
    v1::OptimizerInfo after_set;
    const grpc::Status changed =
        daemon.optimizer_service.SetHyperparameters(&context, &set, &after_set);
    fuzz::Report("SetHyperparameters", changed);
    if (exists && !changed.ok()) {
      v1::OptimizerInfo after;
      if (!daemon.optimizer_service.GetOptimizer(&context, &get, &after).ok() ||
          !fuzz::SameMessage(before, after)) {
        std::abort();  // A refused change changed something.
      }
    }
    absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> changes =
        HyperparametersFromProto(set.hyperparameters(), "hyperparameters");
    if (made.ok() && changes.ok()) {
      StepPrivately(*daemon.kinds, created, *changes);
    }
  }

  v1::ZeroParamGroup group;
  if (fuzz::Parse(rest, &group)) {
    absl::StatusOr<NamedGroupSpec> spec =
        NamedGroupFromProto(group, "groups[0]");
    if (spec.ok()) {
      v1::ZeroParamGroup again;
      NamedGroupToProto(*spec, &again);
    }
  }

  if (made.ok()) {
    v1::DeleteOptimizerRequest remove;
    remove.set_optimizer_id(created.id());
    v1::OptimizerInfo deleted;
    if (!daemon.optimizer_service.DeleteOptimizer(&context, &remove, &deleted)
             .ok()) {
      std::abort();
    }
  }
  if (daemon.budget.used_bytes() != model_bytes) std::abort();
  return 0;
}
