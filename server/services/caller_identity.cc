#include "server/services/caller_identity.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/auth_context.h"

namespace distopt {

std::string CallerIdentity(const grpc::ServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return "";
  // The property gRPC names the peer by (the subject alternative names, or
  // the common name), and its values.
  std::string identity = auth->GetPeerIdentityPropertyName();
  for (const grpc::string_ref& value : auth->GetPeerIdentity()) {
    absl::StrAppend(&identity, "=",
                    absl::string_view(value.data(), value.size()), ";");
  }
  return identity;
}

}  // namespace distopt
