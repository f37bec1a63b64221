// distopt.v1.GroupService: the daemon's data-parallel group, as its flags
// describe it and its membership reports it, and the key-value store.
// Holds nothing but those flags, which never change.
#ifndef DISTOPT_SERVER_SERVICES_GROUP_SERVICE_H_
#define DISTOPT_SERVER_SERVICES_GROUP_SERVICE_H_

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "proto/distopt/v1/group.grpc.pb.h"
#include "server/comm/group_membership.h"
#include "server/comm/key_value_store.h"
#include "server/services/stream_limits.h"

namespace distopt {

// How the daemon was told to find its group (--rank, --world_size,
// --peers, --rendezvous) and the group's secret (--group_secret_file), which
// every call to the store must carry.
struct GroupFlags {
  int rank = 0;
  int world_size = 1;
  std::vector<std::string> peers;
  std::string rendezvous;
  std::string secret;
};

class GroupServiceImpl final : public v1::GroupService::Service {
 public:
  // `store`, `membership` and `streams` must outlive the service;
  // `membership` holds null until the daemon serves, and for a group of one.
  GroupServiceImpl(GroupFlags flags, KeyValueStore* store,
                   const std::atomic<GroupMembership*>* membership,
                   StreamLimits* streams)
      : flags_(std::move(flags)),
        store_(store),
        membership_(membership),
        streams_(streams) {}

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
  grpc::Status Delete(grpc::ServerContext* context,
                      const v1::DeleteRequest* request,
                      v1::DeleteResponse* response) override;
  grpc::Status Reform(grpc::ServerContext* context,
                      const v1::ReformRequest* request,
                      v1::GroupInfo* response) override;

 private:
  // PERMISSION_DENIED unless the call carries the group's secret.
  absl::Status CheckMember(const grpc::ServerContext& context) const;
  void DescribeGroup(v1::GroupInfo* response) const;

  const GroupFlags flags_;
  KeyValueStore* const store_;
  // Set once the daemon serves (the membership starts after the server).
  const std::atomic<GroupMembership*>* const membership_;
  StreamLimits* const streams_;
};

}  // namespace distopt

#endif  // DISTOPT_SERVER_SERVICES_GROUP_SERVICE_H_
