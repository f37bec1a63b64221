// LocalSgdService calls on every rank of a ZeroServiceTest group, as the
// post-local SGD tests make them.
#ifndef DISTOPT_TESTS_LOCAL_SGD_FIXTURE_H_
#define DISTOPT_TESTS_LOCAL_SGD_FIXTURE_H_

#include <vector>

#include "gtest/gtest.h"
#include "proto/distopt/v1/local_sgd.grpc.pb.h"
#include "tests/zero_fixture.h"

namespace distopt {

// Periodic averaging every 2 steps after a warm-up of 2; gradients are
// averaged over both ranks before step 2 and not at all after it.
inline v1::CreatePostLocalSgdRequest Spec(double momentum, int64_t start) {
  v1::CreatePostLocalSgdRequest request;
  request.set_kind("sgd");
  request.set_timeout_ms(5000);
  v1::ZeroParamGroup* group = request.add_groups();
  (*group->mutable_hyperparameters())["lr"].set_number(kLr);
  (*group->mutable_hyperparameters())["momentum"].set_number(momentum);
  for (const auto& [name, shape] : kModel) group->add_parameter_names(name);
  request.mutable_periodic()->set_period(2);
  request.mutable_periodic()->set_warmup_steps(2);
  request.set_start_localsgd_iter(start);
  request.set_no_post_local_gradient_allreduce(true);
  return request;
}

class LocalSgdTest : public ZeroServiceTest {
 protected:
  grpc::Status CreateOnEveryRank(const v1::CreatePostLocalSgdRequest& spec,
                                 std::vector<v1::PostLocalSgdInfo>* infos) {
    infos->resize(world_);
    std::vector<grpc::Status> created = OnEveryRank([&](int r) {
      return LocalSgdCall(r, &v1::LocalSgdService::Stub::CreatePostLocalSgd,
                          spec, &(*infos)[r]);
    });
    for (const grpc::Status& status : created) {
      if (!status.ok()) return status;
    }
    return grpc::Status::OK;
  }

  // Steps every rank on its own gradients of `step` (none for the
  // parameters in `without`); returns the averaged group sizes.
  std::vector<int> StepEveryRank(int step,
                                 const std::vector<size_t>& without = {}) {
    const uint64_t context_id = PushGradients(step, {}, without);
    std::vector<v1::PostLocalSgdStepResponse> responses(world_);
    v1::PostLocalSgdStepRequest request;
    request.set_context_id(context_id);
    std::vector<grpc::Status> stepped = OnEveryRank([&](int r) {
      return LocalSgdCall(r, &v1::LocalSgdService::Stub::Step, request,
                          &responses[r]);
    });
    std::vector<int> sizes;
    for (int r = 0; r < world_; ++r) {
      EXPECT_TRUE(stepped[r].ok()) << r << ": " << stepped[r].error_message();
      sizes.push_back(responses[r].averaged_group_size());
    }
    return sizes;
  }

  template <typename Request, typename Response>
  grpc::Status LocalSgdCall(int rank,
                            grpc::Status (v1::LocalSgdService::Stub::*method)(
                                grpc::ClientContext*, const Request&,
                                Response*),
                            const Request& request, Response* response) {
    auto stub =
        v1::LocalSgdService::NewStub(client_->Channel(addresses_[rank]));
    grpc::ClientContext context;
    return (stub.get()->*method)(&context, request, response);
  }
};

}  // namespace distopt

#endif  // DISTOPT_TESTS_LOCAL_SGD_FIXTURE_H_
