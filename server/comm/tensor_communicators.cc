#include "server/comm/tensor_communicators.h"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "common/backend.h"
#include "server/comm/nccl_communicator.h"
#include "server/comm/paired_communicator.h"
#include "server/comm/staged_communicator.h"

namespace distopt {
namespace {

// Each rank's description travels in a block of this many bytes.
constexpr size_t kDescriptionBytes = 512;

}  // namespace

absl::StatusOr<TensorCommunicators> TensorCommunicators::Choose(
    Communicator& gloo, const Device& device, RendezvousStore* store,
    std::string nccl_prefix, absl::Duration timeout) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  RankDevice mine{device.ToString(), "cpu", host, NcclCompiledIn()};
  if (device.is_cuda()) {
    absl::StatusOr<std::string> identity = DeviceIdentity(device);
    // Still takes part in the exchange: every rank refuses, saying why.
    mine.identity = identity.ok() ? *identity
                                  : absl::StrCat(kUnusableDevice,
                                                 identity.status().message());
  }
  std::string text = mine.Serialize();
  text.resize(std::min(text.size(), kDescriptionBytes - 1));
  std::vector<char> blocks(kDescriptionBytes * gloo.size(), '\0');
  std::copy(text.begin(), text.end(),
            blocks.begin() + kDescriptionBytes * gloo.rank());
  const std::vector<size_t> counts(gloo.size(), kDescriptionBytes);
  absl::Status exchanged = gloo.AllGatherBlocks(absl::MakeSpan(blocks), counts);
  if (!exchanged.ok()) return exchanged;
  std::vector<RankDevice> ranks;
  for (int r = 0; r < gloo.size(); ++r) {
    const char* begin = blocks.data() + kDescriptionBytes * r;
    absl::StatusOr<RankDevice> parsed = RankDevice::Parse(
        std::string(begin, strnlen(begin, kDescriptionBytes)));
    if (!parsed.ok()) {
      return absl::InternalError(absl::StrCat(
          "group: rank ", r, "'s device: ", parsed.status().message()));
    }
    ranks.push_back(*std::move(parsed));
  }
  absl::StatusOr<TensorBackendChoice> choice = ChooseTensorBackend(ranks);
  if (!choice.ok()) return choice.status();
  // Rank 0's random number makes this attempt's NCCL keys its own: a round
  // connected again (after a failed attempt) must not read the unique id
  // an earlier attempt left in the store.
  uint64_t attempt = absl::Uniform<uint64_t>(absl::BitGen());
  absl::Status agreed = gloo.BroadcastBytes(
      absl::MakeSpan(reinterpret_cast<char*>(&attempt), sizeof(attempt)), 0);
  if (!agreed.ok()) return agreed;
  return TensorCommunicators(*std::move(choice), device, store,
                             absl::StrCat(nccl_prefix, "/", attempt), timeout);
}

absl::StatusOr<std::unique_ptr<Communicator>> TensorCommunicators::Pair(
    std::unique_ptr<Communicator> control, const std::string& name) const {
  switch (choice_.backend) {
    case TensorBackend::kGloo:
      return control;
    case TensorBackend::kStagedGloo: {
      absl::StatusOr<std::shared_ptr<Backend>> backend = GetBackend(device_);
      if (!backend.ok()) return backend.status();
      Communicator* host = control.get();
      return std::unique_ptr<Communicator>(std::make_unique<PairedCommunicator>(
          std::move(control), CreateStagedCommunicator(host, *backend)));
    }
    case TensorBackend::kNccl: {
      NcclOptions options;
      options.rank = control->rank();
      options.size = control->size();
      options.device = device_.index;
      // Every rank pairs its communicators in the same order: the count
      // keeps a subgroup made again from reading the first one's keys.
      options.prefix = absl::StrCat(nccl_prefix_, "/", (*pairs_)++, "/", name);
      options.timeout = timeout_;
      absl::StatusOr<std::unique_ptr<Communicator>> nccl =
          CreateNcclCommunicator(options, store_);
      if (!nccl.ok()) return nccl.status();
      return std::unique_ptr<Communicator>(std::make_unique<PairedCommunicator>(
          std::move(control), *std::move(nccl)));
    }
  }
  return absl::InternalError("group: unknown tensor backend");
}

}  // namespace distopt
