#include "server/services/metadata_secret.h"

#include <iterator>

#include "common/constant_time.h"

namespace distopt {

SecretCheck CheckSecret(const CallMetadata& metadata, absl::string_view key,
                        absl::string_view secret) {
  const auto [first, last] =
      metadata.equal_range(grpc::string_ref(key.data(), key.size()));
  if (first == last) return SecretCheck::kMissing;
  if (std::next(first) != last) return SecretCheck::kRepeated;
  const absl::string_view given(first->second.data(), first->second.size());
  return ConstantTimeEquals(given, secret) ? SecretCheck::kMatches
                                           : SecretCheck::kWrong;
}

}  // namespace distopt
