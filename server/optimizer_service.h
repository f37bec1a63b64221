// distopt.v1.OptimizerService: for now the kinds of optimizer this daemon
// runs, from its registry (built-ins and plugins).
#ifndef DISTOPT_SERVER_OPTIMIZER_SERVICE_H_
#define DISTOPT_SERVER_OPTIMIZER_SERVICE_H_

#include "proto/distopt/v1/optimizer.grpc.pb.h"
#include "server/optim/registry.h"

namespace distopt {

class OptimizerServiceImpl final : public v1::OptimizerService::Service {
 public:
  // `registry` must outlive the service.
  explicit OptimizerServiceImpl(const OptimizerRegistry* registry)
      : registry_(registry) {}

  grpc::Status ListOptimizerKinds(
      grpc::ServerContext* context,
      const v1::ListOptimizerKindsRequest* request,
      v1::ListOptimizerKindsResponse* response) override;

 private:
  const OptimizerRegistry* const registry_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIMIZER_SERVICE_H_
