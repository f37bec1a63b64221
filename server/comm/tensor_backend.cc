#include "server/comm/tensor_backend.h"

#include <cstring>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace distopt {
namespace {

constexpr char kSeparator = '\t';

std::string Describe(int rank, const RankDevice& device) {
  if (device.identity == "cpu") return absl::StrCat(rank, " (cpu)");
  return absl::StrCat(rank, " (", device.device, ", ", device.identity, " on ",
                      device.host, ")");
}

}  // namespace

std::string RankDevice::Serialize() const {
  return absl::StrJoin({device, identity, host, std::string(nccl ? "1" : "0")},
                       std::string(1, kSeparator));
}

absl::StatusOr<RankDevice> RankDevice::Parse(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, kSeparator);
  if (parts.size() != 4 || (parts[3] != "0" && parts[3] != "1")) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank device: \"", text,
                     "\"; expected device, identity, host and NCCL (0 or 1) "
                     "separated by tabs"));
  }
  return RankDevice{parts[0], parts[1], parts[2], parts[3] == "1"};
}

absl::StatusOr<TensorBackendChoice> ChooseTensorBackend(
    const std::vector<RankDevice>& ranks) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (absl::StartsWith(ranks[r].identity, kUnusableDevice)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "group: rank ", r, " cannot use its device ", ranks[r].device, " (",
          ranks[r].identity.substr(strlen(kUnusableDevice)),
          "); expected a GPU every rank can identify"));
    }
  }
  std::vector<std::string> on_cpu, on_gpu;
  for (size_t r = 0; r < ranks.size(); ++r) {
    (ranks[r].identity == "cpu" ? on_cpu : on_gpu)
        .push_back(Describe(static_cast<int>(r), ranks[r]));
  }
  if (on_gpu.empty()) {
    return TensorBackendChoice{
        TensorBackend::kGloo, "gloo",
        "every rank holds its parameters in host memory"};
  }
  if (!on_cpu.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group: a mixed group: rank", on_cpu.size() > 1 ? "s " : " ",
        absl::StrJoin(on_cpu, ", "), " in host memory, rank",
        on_gpu.size() > 1 ? "s " : " ", absl::StrJoin(on_gpu, ", "),
        " on GPUs; expected every rank on the same kind of device (start "
        "every daemon with --device=cpu, or every one with --device=cuda:N)"));
  }
  // Ranks per GPU (UUIDs are unique): more than one is a shared GPU.
  std::map<std::string, std::vector<int>> users;
  for (size_t r = 0; r < ranks.size(); ++r) {
    users[ranks[r].identity].push_back(static_cast<int>(r));
  }
  for (const auto& [gpu, sharing] : users) {
    if (sharing.size() > 1) {
      return TensorBackendChoice{
          TensorBackend::kStagedGloo, "gloo-staged",
          absl::StrCat("ranks ", absl::StrJoin(sharing, ", "), " share GPU ",
                       gpu, " on ", ranks[sharing[0]].host,
                       " (NCCL needs a GPU per rank)")};
    }
  }
  std::vector<int> without_nccl;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].nccl) without_nccl.push_back(static_cast<int>(r));
  }
  if (!without_nccl.empty()) {
    return TensorBackendChoice{
        TensorBackend::kStagedGloo, "gloo-staged",
        absl::StrCat("rank", without_nccl.size() > 1 ? "s " : " ",
                     absl::StrJoin(without_nccl, ", "), " built without NCCL")};
  }
  return TensorBackendChoice{TensorBackend::kNccl, "nccl",
                             "every rank has a GPU of its own"};
}

}  // namespace distopt
