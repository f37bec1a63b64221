#include "server/optimizer_service.h"

#include "server/optim/state_dict_proto.h"

namespace distopt {

grpc::Status OptimizerServiceImpl::ListOptimizerKinds(
    grpc::ServerContext*, const v1::ListOptimizerKindsRequest*,
    v1::ListOptimizerKindsResponse* response) {
  for (const std::string& name : registry_->Names()) {
    absl::StatusOr<const OptimizerKind*> kind = registry_->Find(name);
    if (kind.ok()) OptimizerKindToProto(name, **kind, response->add_kinds());
  }
  return grpc::Status::OK;
}

}  // namespace distopt
