#include "server/comm/remote_rendezvous_store.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/group_secret.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace distopt {
namespace {

// Room for the network on top of a Wait's own timeout.
constexpr absl::Duration kCallSlack = absl::Seconds(10);

absl::Status Annotate(const grpc::Status& status, const std::string& address) {
  absl::Status converted = FromGrpcStatus(status);
  if (converted.ok()) return converted;
  return absl::Status(converted.code(),
                      absl::StrCat("the group's store at rank 0's daemon (",
                                   address, "): ", converted.message()));
}

}  // namespace

RemoteRendezvousStore::RemoteRendezvousStore(const std::string& address,
                                             std::string secret)
    : address_(address),
      secret_(std::move(secret)),
      stub_(v1::GroupService::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}

std::unique_ptr<grpc::ClientContext> RemoteRendezvousStore::Context(
    absl::Duration timeout) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  context->AddMetadata(kGroupSecretMetadata, secret_);
  return context;
}

absl::Status RemoteRendezvousStore::Set(const std::string& key,
                                        const std::string& value) {
  v1::SetRequest request;
  request.set_key(key);
  request.set_value(value);
  v1::SetResponse response;
  return Annotate(stub_->Set(Context(kCallSlack).get(), request, &response),
                  address_);
}

absl::StatusOr<std::string> RemoteRendezvousStore::Get(const std::string& key,
                                                       absl::Duration timeout) {
  absl::Status waited = Wait({key}, timeout);
  if (!waited.ok()) return waited;
  v1::GetRequest request;
  request.set_key(key);
  v1::GetResponse response;
  absl::Status status = Annotate(
      stub_->Get(Context(kCallSlack).get(), request, &response), address_);
  if (!status.ok()) return status;
  return response.value();
}

absl::Status RemoteRendezvousStore::Wait(const std::vector<std::string>& keys,
                                         absl::Duration timeout) {
  std::unique_ptr<grpc::ClientContext> context = Context(timeout + kCallSlack);
  // Until the store's daemon has answered once (ranks start in any
  // order), keep trying rather than fail at once.
  context->set_wait_for_ready(!answered_.load(std::memory_order_relaxed));
  v1::WaitRequest request;
  for (const std::string& key : keys) request.add_keys(key);
  request.set_timeout_ms(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
  v1::WaitResponse response;
  const grpc::Status status = stub_->Wait(context.get(), request, &response);
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
      status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    answered_.store(true, std::memory_order_relaxed);
  }
  return Annotate(status, address_);
}

absl::Status RemoteRendezvousStore::Delete(const std::string& key) {
  v1::DeleteRequest request;
  request.set_key(key);
  v1::DeleteResponse response;
  return Annotate(stub_->Delete(Context(kCallSlack).get(), request, &response),
                  address_);
}

}  // namespace distopt
