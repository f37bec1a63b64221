// distopt.v1.GroupService: the daemon's data-parallel group, from its
// options, and the key-value store. Holds no state of its own.
#ifndef DISTOPT_SERVER_GROUP_SERVICE_H_
#define DISTOPT_SERVER_GROUP_SERVICE_H_

#include <atomic>

#include "proto/distopt/v1/group.grpc.pb.h"
#include "server/comm/group_membership.h"
#include "server/comm/key_value_store.h"
#include "server/worker_options.h"

namespace distopt {

class GroupServiceImpl final : public v1::GroupService::Service {
 public:
  // All must outlive the service; `membership` is null for a group of one.
  GroupServiceImpl(const WorkerOptions* options, KeyValueStore* store,
                   const std::atomic<GroupMembership*>* membership)
      : options_(options), store_(store), membership_(membership) {}

  grpc::Status Barrier(grpc::ServerContext* context,
                       const v1::BarrierRequest* request,
                       v1::BarrierResponse* response) override;

  grpc::Status GetGroup(grpc::ServerContext* context,
                        const v1::GetGroupRequest* request,
                        v1::GroupInfo* response) override;
  grpc::Status Set(grpc::ServerContext* context, const v1::SetRequest* request,
                   v1::SetResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context, const v1::GetRequest* request,
                   v1::GetResponse* response) override;
  grpc::Status Wait(grpc::ServerContext* context,
                    const v1::WaitRequest* request,
                    v1::WaitResponse* response) override;
  grpc::Status Add(grpc::ServerContext* context, const v1::AddRequest* request,
                   v1::AddResponse* response) override;

 private:
  const WorkerOptions* const options_;
  KeyValueStore* const store_;
  // Set once the daemon serves (the membership starts after the server).
  const std::atomic<GroupMembership*>* const membership_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_GROUP_SERVICE_H_
