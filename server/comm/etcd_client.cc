#include "server/comm/etcd_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace distopt {
std::string EtcdPrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // Every key.
}

EtcdClient::EtcdClient(const std::string& endpoint) : endpoint_(endpoint) {
  grpc::ChannelArguments arguments;
  // An etcd that restarts is found again within a second, not after
  // gRPC's default backoff of up to two minutes.
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      endpoint, grpc::InsecureChannelCredentials(), arguments);
  kv_ = etcdserverpb::KV::NewStub(channel);
  lease_ = etcdserverpb::Lease::NewStub(channel);
}

std::unique_ptr<grpc::ClientContext> EtcdClient::Context(
    absl::Duration timeout) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  context->set_wait_for_ready(true);
  return context;
}

absl::Status EtcdClient::Annotate(const grpc::Status& status,
                                  const char* call) const {
  absl::Status converted = FromGrpcStatus(status);
  if (converted.ok()) return converted;
  return absl::Status(converted.code(),
                      absl::StrCat("etcd at ", endpoint_, ": ", call, ": ",
                                   converted.message()));
}

absl::Status EtcdClient::Put(const std::string& key, const std::string& value,
                             int64_t lease) {
  etcdserverpb::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_lease(lease);
  etcdserverpb::PutResponse response;
  return Annotate(kv_->Put(Context().get(), request, &response), "Put");
}

absl::StatusOr<std::optional<std::string>> EtcdClient::Get(
    const std::string& key, absl::Duration timeout) {
  etcdserverpb::RangeRequest request;
  request.set_key(key);
  etcdserverpb::RangeResponse response;
  absl::Status status =
      Annotate(kv_->Range(Context(timeout).get(), request, &response), "Range");
  if (!status.ok()) return status;
  if (response.kvs_size() == 0) return std::optional<std::string>();
  return std::optional<std::string>(response.kvs(0).value());
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
EtcdClient::List(const std::string& prefix) {
  etcdserverpb::RangeRequest request;
  request.set_key(prefix);
  request.set_range_end(EtcdPrefixEnd(prefix));
  etcdserverpb::RangeResponse response;
  absl::Status status =
      Annotate(kv_->Range(Context().get(), request, &response), "Range");
  if (!status.ok()) return status;
  std::vector<std::pair<std::string, std::string>> listed;
  for (const etcdserverpb::KeyValue& kv : response.kvs()) {
    listed.emplace_back(kv.key(), kv.value());
  }
  return listed;
}

absl::Status EtcdClient::Delete(const std::string& key) {
  etcdserverpb::DeleteRangeRequest request;
  request.set_key(key);
  etcdserverpb::DeleteRangeResponse response;
  return Annotate(kv_->DeleteRange(Context().get(), request, &response),
                  "DeleteRange");
}

absl::StatusOr<bool> EtcdClient::PutIfAbsent(const std::string& key,
                                             const std::string& value,
                                             int64_t lease,
                                             std::string* holder) {
  etcdserverpb::TxnRequest request;
  // A key that does not exist has create revision 0.
  etcdserverpb::Compare* absent = request.add_compare();
  absent->set_key(key);
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_create_revision(0);
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  request.add_failure()->mutable_request_range()->set_key(key);
  etcdserverpb::TxnResponse response;
  absl::Status status =
      Annotate(kv_->Txn(Context().get(), request, &response), "Txn");
  if (!status.ok()) return status;
  if (response.succeeded()) return true;
  holder->clear();
  if (response.responses_size() == 1 &&
      response.responses(0).response_range().kvs_size() == 1) {
    *holder = response.responses(0).response_range().kvs(0).value();
  }
  return false;
}

absl::StatusOr<int64_t> EtcdClient::GrantLease(absl::Duration ttl) {
  etcdserverpb::LeaseGrantRequest request;
  // Whole seconds: a part of one is rounded up, never down.
  request.set_ttl(std::max<int64_t>(
      1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1)))));
  etcdserverpb::LeaseGrantResponse response;
  absl::Status status = Annotate(
      lease_->LeaseGrant(Context().get(), request, &response), "LeaseGrant");
  if (!status.ok()) return status;
  if (!response.error().empty()) {
    return absl::UnavailableError(absl::StrCat(
        "etcd at ", endpoint_, ": LeaseGrant: ", response.error()));
  }
  return response.id();
}

absl::Status EtcdClient::KeepAlive(int64_t lease, absl::Duration timeout) {
  std::unique_ptr<grpc::ClientContext> context = Context(timeout);
  std::unique_ptr<
      grpc::ClientReaderWriter<etcdserverpb::LeaseKeepAliveRequest,
                               etcdserverpb::LeaseKeepAliveResponse>>
      stream = lease_->LeaseKeepAlive(context.get());
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse response;
  const bool answered = stream->Write(request) && stream->Read(&response);
  stream->WritesDone();
  absl::Status finished = Annotate(stream->Finish(), "LeaseKeepAlive");
  if (!finished.ok()) return finished;
  if (!answered) {
    return absl::UnavailableError(
        absl::StrCat("etcd at ", endpoint_,
                     ": LeaseKeepAlive: the stream ended unanswered"));
  }
  // etcd answers an expired lease with a TTL of 0 or less.
  if (response.ttl() <= 0) {
    return absl::NotFoundError(
        absl::StrCat("etcd at ", endpoint_, ": lease ", lease, " has expired"));
  }
  return absl::OkStatus();
}

absl::Status EtcdClient::RevokeLease(int64_t lease, absl::Duration timeout) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  return Annotate(
      lease_->LeaseRevoke(Context(timeout).get(), request, &response),
      "LeaseRevoke");
}

}  // namespace distopt
