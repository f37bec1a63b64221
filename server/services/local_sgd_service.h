// distopt.v1.LocalSgdService: translates between the wire messages and
// the daemon's LocalSgdRunner. Holds no state of its own.
#ifndef DISTOPT_SERVER_SERVICES_LOCAL_SGD_SERVICE_H_
#define DISTOPT_SERVER_SERVICES_LOCAL_SGD_SERVICE_H_

#include "common/memory_budget.h"
#include "proto/distopt/v1/local_sgd.grpc.pb.h"
#include "server/localsgd/local_sgd_runner.h"
#include "server/services/stream_limits.h"

namespace distopt {

class LocalSgdServiceImpl final : public v1::LocalSgdService::Service {
 public:
  // All must outlive the service; `budget` is charged for state dicts
  // while they arrive.
  LocalSgdServiceImpl(LocalSgdRunner* runner, StreamLimits* streams,
                      MemoryBudget* budget)
      : runner_(runner), streams_(streams), budget_(budget) {}

  grpc::Status CreatePostLocalSgd(grpc::ServerContext* context,
                                  const v1::CreatePostLocalSgdRequest* request,
                                  v1::PostLocalSgdInfo* response) override;
  grpc::Status Step(grpc::ServerContext* context,
                    const v1::PostLocalSgdStepRequest* request,
                    v1::PostLocalSgdStepResponse* response) override;
  grpc::Status SetHyperparameters(
      grpc::ServerContext* context,
      const v1::SetZeroHyperparametersRequest* request,
      v1::PostLocalSgdInfo* response) override;
  grpc::Status GetPostLocalSgd(grpc::ServerContext* context,
                               const v1::GetPostLocalSgdRequest* request,
                               v1::PostLocalSgdInfo* response) override;
  grpc::Status GetStateDict(
      grpc::ServerContext* context,
      const v1::GetPostLocalSgdStateDictRequest* request,
      grpc::ServerWriter<v1::MessageChunk>* writer) override;
  grpc::Status LoadStateDict(
      grpc::ServerContext* context,
      grpc::ServerReader<v1::MessageChunk>* reader,
      v1::LoadPostLocalSgdStateDictResponse* response) override;

 private:
  LocalSgdRunner* const runner_;
  StreamLimits* const streams_;
  MemoryBudget* const budget_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_LOCAL_SGD_SERVICE_H_
