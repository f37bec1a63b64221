// distopt.v1.CheckpointService: save a checkpoint now, list the kept ones.
// The daemon's Checkpointer does the work; this translates.
#ifndef DISTOPT_SERVER_SERVICES_CHECKPOINT_SERVICE_H_
#define DISTOPT_SERVER_SERVICES_CHECKPOINT_SERVICE_H_

#include "proto/distopt/v1/checkpoint.grpc.pb.h"
#include "server/params/checkpoint_control.h"

namespace distopt {

class CheckpointServiceImpl final : public v1::CheckpointService::Service {
 public:
  // `control` is null without --checkpoint_dir; else it must outlive this.
  explicit CheckpointServiceImpl(CheckpointControl* control)
      : control_(control) {}

  grpc::Status Save(grpc::ServerContext* context,
                    const v1::SaveCheckpointRequest* request,
                    v1::CheckpointInfo* response) override;
  grpc::Status ListCheckpoints(grpc::ServerContext* context,
                               const v1::ListCheckpointsRequest* request,
                               v1::ListCheckpointsResponse* response) override;

 private:
  CheckpointControl* const control_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_CHECKPOINT_SERVICE_H_
