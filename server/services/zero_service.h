// distopt.v1.ZeroService: translates between the wire messages and the
// daemon's ZeroRunner. Holds no state of its own.
#ifndef DISTOPT_SERVER_SERVICES_ZERO_SERVICE_H_
#define DISTOPT_SERVER_SERVICES_ZERO_SERVICE_H_

#include "common/memory_budget.h"
#include "proto/distopt/v1/zero.grpc.pb.h"
#include "server/services/stream_limits.h"
#include "server/zero/zero_runner.h"

namespace distopt {

class ZeroServiceImpl final : public v1::ZeroService::Service {
 public:
  // All must outlive the service; `budget` is charged for state dicts
  // while they arrive.
  ZeroServiceImpl(ZeroRunner* runner, StreamLimits* streams,
                  MemoryBudget* budget)
      : runner_(runner), streams_(streams), budget_(budget) {}

  grpc::Status CreateZero(grpc::ServerContext* context,
                          const v1::CreateZeroRequest* request,
                          v1::ZeroInfo* response) override;
  grpc::Status Step(grpc::ServerContext* context,
                    const v1::ZeroStepRequest* request,
                    v1::ZeroStepResponse* response) override;
  grpc::Status GetZero(grpc::ServerContext* context,
                       const v1::GetZeroRequest* request,
                       v1::ZeroInfo* response) override;
  grpc::Status Join(grpc::ServerContext* context,
                    const v1::ZeroJoinRequest* request,
                    v1::ZeroJoinResponse* response) override;
  grpc::Status AddParamGroup(grpc::ServerContext* context,
                             const v1::AddZeroParamGroupRequest* request,
                             v1::ZeroInfo* response) override;
  grpc::Status SetHyperparameters(
      grpc::ServerContext* context,
      const v1::SetZeroHyperparametersRequest* request,
      v1::ZeroInfo* response) override;
  grpc::Status ConsolidateStateDict(
      grpc::ServerContext* context,
      const v1::ConsolidateZeroStateDictRequest* request,
      v1::ConsolidateZeroStateDictResponse* response) override;
  grpc::Status GetStateDict(
      grpc::ServerContext* context, const v1::GetZeroStateDictRequest* request,
      grpc::ServerWriter<v1::MessageChunk>* writer) override;
  grpc::Status LoadStateDict(grpc::ServerContext* context,
                             grpc::ServerReader<v1::MessageChunk>* reader,
                             v1::LoadZeroStateDictResponse* response) override;

 private:
  ZeroRunner* const runner_;
  StreamLimits* const streams_;
  MemoryBudget* const budget_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_ZERO_SERVICE_H_
