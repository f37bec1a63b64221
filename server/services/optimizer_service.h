// distopt.v1.OptimizerService: the kinds of optimizer this daemon runs
// (its registry: built-ins and plugins) and the optimizers over its
// parameters (OptimizerTable). Holds no state of its own.
#ifndef DISTOPT_SERVER_SERVICES_OPTIMIZER_SERVICE_H_
#define DISTOPT_SERVER_SERVICES_OPTIMIZER_SERVICE_H_

#include "common/memory_budget.h"
#include "proto/distopt/v1/optimizer.grpc.pb.h"
#include "server/dist_optim/optimizer_table.h"
#include "server/optim/registry.h"
#include "server/services/stream_limits.h"

namespace distopt {

class OptimizerServiceImpl final : public v1::OptimizerService::Service {
 public:
  // All must outlive the service; `budget` is charged for state dicts
  // while they arrive.
  OptimizerServiceImpl(const OptimizerRegistry* registry,
                       OptimizerTable* optimizers, StreamLimits* streams,
                       MemoryBudget* budget)
      : registry_(registry),
        optimizers_(optimizers),
        streams_(streams),
        budget_(budget) {}

  grpc::Status ListOptimizerKinds(
      grpc::ServerContext* context,
      const v1::ListOptimizerKindsRequest* request,
      v1::ListOptimizerKindsResponse* response) override;
  grpc::Status CreateOptimizer(grpc::ServerContext* context,
                               const v1::CreateOptimizerRequest* request,
                               v1::OptimizerInfo* response) override;
  grpc::Status Step(grpc::ServerContext* context,
                    const v1::StepRequest* request,
                    v1::StepResponse* response) override;
  grpc::Status StepStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::StepOutcome, v1::StepRequest>* stream)
      override;
  grpc::Status GetOptimizer(grpc::ServerContext* context,
                            const v1::GetOptimizerRequest* request,
                            v1::OptimizerInfo* response) override;
  grpc::Status ListOptimizers(grpc::ServerContext* context,
                              const v1::ListOptimizersRequest* request,
                              v1::ListOptimizersResponse* response) override;
  grpc::Status SetHyperparameters(grpc::ServerContext* context,
                                  const v1::SetHyperparametersRequest* request,
                                  v1::OptimizerInfo* response) override;
  grpc::Status GetStateDict(
      grpc::ServerContext* context, const v1::GetStateDictRequest* request,
      grpc::ServerWriter<v1::MessageChunk>* writer) override;
  grpc::Status LoadStateDict(grpc::ServerContext* context,
                             grpc::ServerReader<v1::MessageChunk>* reader,
                             v1::LoadStateDictResponse* response) override;
  grpc::Status DeleteOptimizer(grpc::ServerContext* context,
                               const v1::DeleteOptimizerRequest* request,
                               v1::OptimizerInfo* response) override;

 private:
  // One step, as Step and StepStream serve it.
  absl::Status StepInto(const v1::StepRequest& request,
                        v1::StepResponse* response, absl::string_view caller);

  const OptimizerRegistry* const registry_;
  OptimizerTable* const optimizers_;
  StreamLimits* const streams_;
  MemoryBudget* const budget_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_OPTIMIZER_SERVICE_H_
