#include "server/zero_service.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "server/optim/state_dict_proto.h"

namespace distopt {
namespace {

constexpr int64_t kMaxTimeoutMilliseconds = 3600 * 1000;

grpc::Status Reply(const absl::StatusOr<ZeroStatus>& status,
                   v1::ZeroInfo* response) {
  if (!status.ok()) return ToGrpcStatus(status.status());
  for (const auto& [name, rank] : status->owners) {
    v1::ZeroParameterOwner* owner = response->add_owners();
    owner->set_name(name);
    owner->set_rank(rank);
  }
  response->mutable_loads()->Assign(status->loads.begin(), status->loads.end());
  response->set_state_bytes(status->state_bytes);
  response->set_steps(status->steps);
  response->set_parameter_bytes(status->parameter_bytes);
  response->set_gradient_bytes(status->gradient_bytes);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status ZeroServiceImpl::CreateZero(grpc::ServerContext*,
                                         const v1::CreateZeroRequest* request,
                                         v1::ZeroInfo* response) {
  ZeroSpec spec;
  spec.kind = request->kind();
  const int64_t timeout_ms =
      request->timeout_ms() == 0 ? 60000 : request->timeout_ms();
  if (timeout_ms < 1 || timeout_ms > kMaxTimeoutMilliseconds) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("timeout_ms: ", request->timeout_ms(), "; expected 1 to ",
                     kMaxTimeoutMilliseconds, ", or 0 for 60000")));
  }
  spec.timeout = absl::Milliseconds(timeout_ms);
  for (int g = 0; g < request->groups_size(); ++g) {
    ZeroSpec::Group group;
    absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> values =
        HyperparametersFromProto(
            request->groups(g).hyperparameters(),
            absl::StrCat("groups[", g, "].hyperparameters"));
    if (!values.ok()) return ToGrpcStatus(values.status());
    group.hyperparameters = *std::move(values);
    group.parameter_names.assign(request->groups(g).parameter_names().begin(),
                                 request->groups(g).parameter_names().end());
    spec.groups.push_back(std::move(group));
  }
  if (spec.groups.empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "groups: empty; expected at least one parameter group"));
  }
  return Reply(runner_->Create(spec), response);
}

grpc::Status ZeroServiceImpl::Step(grpc::ServerContext*,
                                   const v1::ZeroStepRequest* request,
                                   v1::ZeroStepResponse*) {
  return ToGrpcStatus(runner_->Step(request->context_id()));
}

grpc::Status ZeroServiceImpl::GetZero(grpc::ServerContext*,
                                      const v1::GetZeroRequest*,
                                      v1::ZeroInfo* response) {
  return Reply(runner_->Get(), response);
}

}  // namespace distopt
