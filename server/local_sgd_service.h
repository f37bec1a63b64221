// distopt.v1.PostLocalSgdService: translates between the wire messages and
// the daemon's LocalSgdRunner. Holds no state of its own.
#ifndef DISTOPT_SERVER_LOCAL_SGD_SERVICE_H_
#define DISTOPT_SERVER_LOCAL_SGD_SERVICE_H_

#include "proto/distopt/v1/local_sgd.grpc.pb.h"
#include "server/localsgd/local_sgd_runner.h"

namespace distopt {

class PostLocalSgdServiceImpl final : public v1::PostLocalSgdService::Service {
 public:
  // `runner` must outlive the service.
  explicit PostLocalSgdServiceImpl(LocalSgdRunner* runner) : runner_(runner) {}

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
  grpc::Status GetStateDict(grpc::ServerContext* context,
                            const v1::GetPostLocalSgdStateDictRequest* request,
                            v1::PostLocalSgdStateDict* response) override;
  grpc::Status LoadStateDict(
      grpc::ServerContext* context, const v1::PostLocalSgdStateDict* request,
      v1::LoadPostLocalSgdStateDictResponse* response) override;

 private:
  LocalSgdRunner* const runner_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_LOCAL_SGD_SERVICE_H_
